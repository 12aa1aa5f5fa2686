"""Signals that reach only the process they mean: every signal tpu_nb sends to a process it did not just fork goes here.

A pid names a process only while it runs: once it exits, the next process
may get the same number. So a target is a pid *and* the start time seen when
it was chosen, and `send_signal` opens a pidfd (`os.pidfd_open`, Linux 5.3
and newer), which holds on to one process whatever happens to the number,
then checks through it that the process is still the one chosen (same start
time) and still a target (the caller's check: it still holds the device, it
is still this run's worker), and only then signals it through the pidfd.
Without pidfds the same checks run right before `os.kill`, which leaves the
smallest window there is.

A process group is signalled (`send_group_signal`) only while it has a
member that has not exited: a group's id cannot go to another process while
any member lives, so the signal reaches that group's processes and no other.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from tpu_nb.runtime.system import SystemView


@dataclass(frozen=True, slots=True)
class Target:
    """A process to signal: its pid and when it started (`SystemView.process_started_at`), as seen when it was chosen."""

    pid: int
    started_at: float | None

    @classmethod
    def seen(cls, pid: int, system: SystemView | None = None) -> Target:
        """The process running as `pid` now."""
        return cls(pid, (system or SystemView.current()).process_started_at(pid))


class Delivery(str, Enum):
    """What became of a signal."""

    SENT = "sent"
    GONE = "gone"
    """The process had exited, or its pid belonged to a newer process: nothing was sent."""
    NOT_A_TARGET = "not a target"
    """The process no longer was what made it a target (the caller's check): nothing was sent."""
    REFUSED = "refused"
    """The system did not allow it (another user's process)."""


def send_signal(
    target: Target,
    signum: int,
    *,
    still_target: Callable[[], bool] = lambda: True,
    system: SystemView | None = None,
) -> Delivery:
    """Signal `target` if it still runs as the process chosen and `still_target()` holds; what happened."""
    system = system or SystemView.current()
    try:
        pidfd: int | None = os.pidfd_open(target.pid)
    except ProcessLookupError:
        return Delivery.GONE
    except (AttributeError, OSError):  # no pidfd_open here (not Linux, or older than 5.3): the checks right before os.kill
        pidfd = None
    try:
        if target.started_at is None or system.process_started_at(target.pid) != target.started_at:
            return Delivery.GONE
        if not still_target():
            return Delivery.NOT_A_TARGET
        if pidfd is None:
            return _delivered(lambda: os.kill(target.pid, signum))
        return _delivered(lambda: signal.pidfd_send_signal(pidfd, signum))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def send_group_signal(pgid: int, signum: int) -> Delivery:
    """Signal process group `pgid` while a member of it runs; GONE (nothing sent) once none does."""
    if not live_group_members(pgid):
        return Delivery.GONE
    return _delivered(lambda: os.killpg(pgid, signum))


def _delivered(send: Callable[[], None]) -> Delivery:
    """What became of the signal `send()` sends: the OS's errno as a Delivery (ESRCH: GONE, EPERM: REFUSED)."""
    try:
        send()
    except ProcessLookupError:
        return Delivery.GONE
    except PermissionError:
        return Delivery.REFUSED
    return Delivery.SENT


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group `pgid` that have not exited.

    Not `killpg(pgid, 0)`: that also finds exited processes that an init
    which does not reap (common in containers) leaves as zombies.
    """
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        # Fields after the command name, which is in parentheses and may hold spaces.
        state, _ppid, pgrp = text[text.rindex(")") + 2 :].split(" ", 3)[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members
