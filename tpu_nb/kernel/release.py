"""`%tpu_release`: end the processes left holding the TPU (SIGTERM, then SIGKILL), and say what was ended and what was left.

Never the kernel or a process it runs under, never another user's process,
and never one this kernel started: that is a run to stop through its cell
or handle, or something a cell started on purpose.
"""

from __future__ import annotations

import html
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from tpu_nb.runtime.device_holders import DeviceHolder, Origin, tpu_device_holders
from tpu_nb.runtime.system import SystemView

TERM_GRACE = 3.0  # seconds a holder gets to exit after SIGTERM (a worker closing the TPU needs about a second)
KILL_WAIT = 5.0  # seconds for SIGKILLed holders to disappear
_POLL = 0.05

Send = Callable[[int, int], None]
"""How a signal is sent (os.kill; tests record instead when the pids are fake)."""


@dataclass(frozen=True, slots=True)
class Ended:
    """A holder that is gone, and what it took."""

    holder: DeviceHolder
    by: str | None
    """The signal that ended it, "SIGTERM" or "SIGKILL"; None when it had exited by itself before it was signalled."""


@dataclass(frozen=True, slots=True)
class Left:
    """A holder left running, why, and what the user can do."""

    holder: DeviceHolder
    reason: str
    fix: str


@dataclass(frozen=True, slots=True)
class Release:
    """What `%tpu_release` did (or, in a dry run, would do)."""

    ended: tuple[Ended, ...]
    left: tuple[Left, ...]
    would_end: tuple[DeviceHolder, ...] = ()
    """In a dry run, the holders it would end; nothing was signalled."""


def release_tpu(
    system: SystemView,
    running: str | None,
    *,
    dry_run: bool = False,
    grace: float = TERM_GRACE,
    send: Send = os.kill,
) -> Release:
    """End the stale holders of the TPU's device files seen through `system`; `running` names this kernel's live run, if any."""
    holders = tpu_device_holders(system)
    left = [reason for holder in holders if (reason := _reason_to_leave(holder, system.own_uid, running)) is not None]
    kept = {reason.holder.pid for reason in left}
    stale = tuple(holder for holder in holders if holder.pid not in kept)
    if dry_run:
        return Release((), tuple(left), would_end=stale)
    ended, not_ended = _end(system, stale, grace, send)
    return Release(ended, (*left, *not_ended))


def describe_release(release: Release) -> tuple[str, str]:
    """What `%tpu_release` shows: (text, HTML)."""
    sections: list[tuple[str, list[str]]] = []
    if release.would_end:
        heading = f"Would end {_processes(len(release.would_end))} holding the TPU (dry run: nothing was signalled):"
        sections.append((heading, [holder.summary for holder in release.would_end]))
    if release.ended:
        sections.append((f"Ended {_processes(len(release.ended))} holding the TPU:", [_ended_line(ended) for ended in release.ended]))
    if release.left:
        heading = f"Left {_processes(len(release.left))} holding the TPU:"
        sections.append((heading, [f"{_name(left.holder)}: {left.reason}. Fix: {left.fix}" for left in release.left]))
    if not sections:
        text = "Nothing to release: no other process holds the TPU's device files."
        return text, f"<p>{html.escape(text)}</p>"
    text = "\n".join(line for heading, lines in sections for line in (heading, *(f"  {line}" for line in lines)))
    markup = "".join(
        f"<p><strong>{html.escape(heading)}</strong></p><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"
        for heading, lines in sections
    )
    return text, f'<div class="tpu-nb-release">{markup}</div>'


def _reason_to_leave(holder: DeviceHolder, own_uid: int, running: str | None) -> Left | None:
    if holder.origin is Origin.KERNEL_ANCESTOR:
        return Left(holder, "this kernel runs under it, so ending it would end the kernel", "restart the runtime")
    if holder.uid is None:
        return Left(holder, "its owner could not be read (it may just have exited)", f"run %tpu_release again, or kill {holder.pid}")
    if holder.uid != own_uid:
        return Left(
            holder,
            f"it belongs to {holder.owner}, not to you",
            f"sudo kill {holder.pid} (or ask {holder.owner} to end it), or restart the runtime",
        )
    if holder.origin is Origin.THIS_KERNEL and running is not None:
        return Left(
            holder,
            f"{holder.origin_text}, where {running} is still running",
            "interrupt the cell running it, or call .stop() or .kill() on a background run's handle",
        )
    if holder.origin is Origin.THIS_KERNEL:
        return Left(holder, f"{holder.origin_text}, not as a tpu_nb run", f"end it where you started it, or kill {holder.pid}")
    return None


def _end(system: SystemView, holders: tuple[DeviceHolder, ...], grace: float, send: Send) -> tuple[tuple[Ended, ...], tuple[Left, ...]]:
    """SIGTERM every holder, SIGKILL those still there after `grace` seconds, and wait for them to go."""
    ended: list[Ended] = []
    refused: list[Left] = []
    waiting = []
    for holder in holders:
        if not _still_there(system, holder):
            ended.append(Ended(holder, None))
        elif (refusal := _signal(holder, signal.SIGTERM, send)) is not None:
            refused.append(refusal)
        else:
            waiting.append(holder)
    stubborn = _wait_for(system, waiting, grace)
    ended += [Ended(holder, "SIGTERM") for holder in waiting if holder not in stubborn]
    killed = []
    for holder in stubborn:
        if (refusal := _signal(holder, signal.SIGKILL, send)) is not None:
            refused.append(refusal)
        else:
            killed.append(holder)
    survivors = _wait_for(system, killed, KILL_WAIT)
    ended += [Ended(holder, "SIGKILL") for holder in killed if holder not in survivors]
    refused += [
        Left(
            holder,
            f"it is still there {KILL_WAIT:g}s after SIGKILL (stuck in the device driver)",
            "restart the runtime; if the TPU stays busy, restart the machine",
        )
        for holder in survivors
    ]
    return tuple(ended), tuple(refused)


def _signal(holder: DeviceHolder, signum: signal.Signals, send: Send) -> Left | None:
    """Send `signum`; a Left when the system refused (a process gone meanwhile needs nothing)."""
    try:
        send(holder.pid, signum)
    except ProcessLookupError:
        pass  # exited meanwhile: _wait_for sees it gone
    except PermissionError:
        return Left(holder, f"the system did not allow signalling it ({signum.name}: permission denied)", f"sudo kill {holder.pid}")
    return None


def _wait_for(system: SystemView, holders: list[DeviceHolder], seconds: float) -> list[DeviceHolder]:
    """The holders still there after waiting up to `seconds` for all of them to go."""
    deadline = time.monotonic() + seconds
    remaining = [holder for holder in holders if _still_there(system, holder)]
    while remaining and time.monotonic() < deadline:
        time.sleep(_POLL)
        remaining = [holder for holder in remaining if _still_there(system, holder)]
    return remaining


def _still_there(system: SystemView, holder: DeviceHolder) -> bool:
    """Whether the holder runs: not exited, not a zombie (which holds no files), its pid not reused by a newer process."""
    status = system.process_status(holder.pid)
    if status is None or status.state in ("Z", "X"):
        return False
    return system.process_started_at(holder.pid) == holder.started_at


def _ended_line(ended: Ended) -> str:
    if ended.by is None:
        return f"{_name(ended.holder)}: had exited by itself"
    if ended.by == "SIGKILL":
        return f"{_name(ended.holder)}: needed SIGKILL (still running after SIGTERM)"
    return f"{_name(ended.holder)}: ended by SIGTERM"


def _name(holder: DeviceHolder) -> str:
    return f"pid {holder.pid} ({holder.command})"


def _processes(number: int) -> str:
    return f"{number} process{'' if number == 1 else 'es'}"
