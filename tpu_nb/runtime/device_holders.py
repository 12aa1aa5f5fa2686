"""Who holds the TPU's device files: each process with its command line, age, owner, whether this kernel started it, and whether it is stale.

Orphaned workers of an earlier kernel keep /dev/accel* or /dev/vfio/* open
and the TPU stays "busy" (pytorch/xla#8569, #7761) with nothing visible in
the notebook. This names them, so that `%tpu_release` or the user can end
the right ones, and tells them from what still works: another notebook's
kernel, a `nohup python train.py &` started from a cell.

A process belongs to the session it was started in: a kernel starts one of
its own (jupyter_client starts kernels with `start_new_session`), a terminal
another, and whatever a cell starts, forked workers or `!nohup ... &` alike,
stays in its kernel's session even once re-parented to init. So a holder is
stale when it is a copy forked from a kernel (the same command line) that
no longer runs under it (a tpu_nb worker or supervisor whose run ended
without it), or when its session's leader is gone and it was started from
a notebook kernel: a fork of one (its command line is a kernel's: tpu_nb's
workers and supervisors, a cell's multiprocessing), or anything a cell
started (its environment holds JPY_PARENT_PID, which jupyter_client gives
every kernel). Its parent chain cannot tell (an orphan's parent is init),
nor could a mark tpu_nb set in its workers (they are forked, and /proc
shows the environment a process was exec'd with, not what it set since).
A holder whose shell is gone with no such sign (`nohup python train.py &`
over SSH, then logging out) may run on purpose: it is live, for the user
to name. A kernel need not lead its session: jupyter_client's launcher
(8.10: `start_new_session=True` on every POSIX launch, with JPY_PARENT_PID)
starts every kernel a Jupyter server runs (Colab's `colab_kernel_launcher`
and Kaggle's kernels too) as its session's leader, but VS Code starts its
kernels as plain children of its extension host, in the session of the SSH
login that started its server, which may be gone. So a holder with a
kernel's command line whose leader is gone is live while the first process
above it with another command line runs in its session (its launcher);
one init or a subreaper adopted (another session) is an orphan. What is
left unseen: a kernel started through a wrapper that did not exec it
(`bash -c` in a kernelspec) once that wrapper exited, which looks like a
fork init adopted. Everything else is live too: what shares this kernel's session
(it runs, since we do), and what belongs to a session whose leader is
outside this container (session 0 here: `docker exec`, some notebook
images), because nothing here can tell whether that leader still runs.
"""

from __future__ import annotations

import pwd
import re
import shlex
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePosixPath

from tpu_nb.runtime.system import OpenedBy, SystemView

TPU_DEVICE_NODE = re.compile(r"/dev/(accel\d+|vfio/\d+)")
COMMAND_WIDTH = 100  # characters of a command line shown; a kernel's or a worker's runs far longer
KERNEL_MARK = "JPY_PARENT_PID"
"""In every kernel's environment (jupyter_client's launcher sets it, on POSIX), so in everything a cell starts."""


class Origin(str, Enum):
    """How a holder is related to the process looking (the kernel)."""

    THIS_KERNEL = "this_kernel"
    """Started by this kernel (a descendant): one of its runs, or something run from a cell."""
    KERNEL_ANCESTOR = "kernel_ancestor"
    """A process this kernel runs under (its server, its container's init): ending it ends the kernel."""
    ELSEWHERE = "elsewhere"
    """Not from this kernel: another notebook's, or left behind by an earlier kernel."""


@dataclass(frozen=True, slots=True)
class DeviceHolder:
    """A process other than ours with TPU device files open."""

    pid: int
    command: str
    """Its command line, shortened to COMMAND_WIDTH."""
    paths: tuple[str, ...]
    uid: int | None
    """Its real user id; None when it exited while we looked."""
    owner: str | None
    """Its user's name (or "uid N" when the name is unknown)."""
    origin: Origin
    parent: int | None
    """Its parent's pid; None when it exited while we looked."""
    child_of_kernel: bool
    """Whether its parent is the kernel itself (a worker's parent is its run's supervisor, the kernel's child)."""
    started_at: float | None
    seen_at: float
    """When we looked: its age is counted to then."""
    session: int | None = None
    """The session it belongs to (its leader's pid); None when it exited while we looked."""
    stale_because: str | None = None
    """Why it is stale, for one not from this kernel; None when it is live (or from this kernel)."""
    belongs_to: str | None = None
    """What it belongs to, for a live one not from this kernel: "another notebook kernel", "started from this notebook", ..."""

    @property
    def stale(self) -> bool:
        """Whether `%tpu_release` ends it without being asked: not this kernel's, and the notebook kernel it came from is gone."""
        return self.stale_because is not None

    @property
    def age(self) -> float | None:
        """Seconds it had been running when we looked."""
        return None if self.started_at is None else max(0.0, self.seen_at - self.started_at)

    @property
    def origin_text(self) -> str:
        """Its relation to the kernel, in words."""
        if self.origin is Origin.THIS_KERNEL:
            return f"started by this kernel ({'child of the kernel' if self.child_of_kernel else f'under pid {self.parent}'})"
        if self.origin is Origin.KERNEL_ANCESTOR:
            return "this kernel runs under it"
        if self.stale_because is not None:
            return f"stale: {self.stale_because}"
        return f"live: {self.belongs_to}"

    @property
    def summary(self) -> str:
        """One line: pid, command, device files, age, owner, origin."""
        age = "" if self.age is None else f", running {describe_age(self.age)}"
        owner = "" if self.owner is None else f", user {self.owner}"
        return f"pid {self.pid} ({self.command}) has {', '.join(self.paths)} open{age}{owner}, {self.origin_text}"


def is_tpu_device(path: str) -> bool:
    """Whether `path` names a TPU device file (/dev/accel0, /dev/vfio/0; not the shared /dev/vfio/vfio)."""
    return TPU_DEVICE_NODE.fullmatch(path) is not None


def tpu_device_holders(system: SystemView) -> tuple[DeviceHolder, ...]:
    """Every process other than ours holding a TPU device file, by pid."""
    seen_at = time.time()
    ancestors = _ancestors(system, system.own_pid)
    return tuple(_describe(system, opened, ancestors, seen_at) for opened in system.opened_by_other_processes(is_tpu_device))


def holds_tpu(system: SystemView, pid: int) -> bool:
    """Whether process `pid` holds a TPU device file now (checked again right before it is signalled)."""
    return any(opened.pid == pid for opened in system.opened_by_other_processes(is_tpu_device, pids=(pid,)))


def is_kernel(arguments: tuple[str, ...]) -> bool:
    """Whether a command line is a Jupyter kernel's (ipykernel's launcher, Colab's)."""
    return any("ipykernel" in argument or argument.endswith("kernel_launcher") for argument in arguments)


def kernel_name(pid: int, arguments: tuple[str, ...]) -> str:
    """A kernel as a person can find it: its pid and connection file (kernel-<id>.json), when it names one."""
    connection = next((PurePosixPath(argument).name for argument in arguments if argument.endswith(".json")), None)
    return f"kernel pid {pid}" + (f" ({connection})" if connection else "")


def describe_age(seconds: float) -> str:
    """A duration as a person would say it: "42s", "3m 05s", "2h 07m", "3d 4h"."""
    whole = int(seconds)
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _describe(system: SystemView, opened: OpenedBy, ancestors: frozenset[int], seen_at: float) -> DeviceHolder:
    status = system.process_status(opened.pid)
    if opened.pid in ancestors:
        origin = Origin.KERNEL_ANCESTOR
    elif system.own_pid in _ancestors(system, opened.pid):
        origin = Origin.THIS_KERNEL
    else:
        origin = Origin.ELSEWHERE
    started_at = system.process_started_at(opened.pid)
    session = system.process_session(opened.pid)
    stale_because = belongs_to = None
    if origin is Origin.ELSEWHERE:
        stale_because, belongs_to = _standing(system, opened.pid, session, started_at)
    return DeviceHolder(
        pid=opened.pid,
        command=_shortened(system.command_line(opened.pid), opened.command),
        paths=opened.paths,
        uid=None if status is None else status.uid,
        owner=None if status is None else _user_name(status.uid),
        origin=origin,
        parent=None if status is None else status.parent,
        child_of_kernel=status is not None and status.parent == system.own_pid,
        started_at=started_at,
        seen_at=seen_at,
        session=session,
        stale_because=stale_because,
        belongs_to=belongs_to,
    )


def _standing(system: SystemView, pid: int, session: int | None, started_at: float | None) -> tuple[str | None, str | None]:
    """(why it is stale, None) or (None, what it belongs to), for a holder not from this kernel."""
    if session is None:
        return "it exited while we looked", None  # nothing left to end: `%tpu_release` finds it gone
    arguments = system.command_line(pid)
    if session == pid:
        return None, ("another notebook kernel, " + kernel_name(pid, arguments)) if is_kernel(arguments) else "a process of its own session"
    own_arguments = system.command_line(system.own_pid)
    own_session = system.process_session(system.own_pid)
    if session in (own_session, 0) and arguments and arguments == own_arguments and system.own_pid not in _ancestors(system, pid):
        return (
            f"a copy forked from {kernel_name(system.own_pid, own_arguments)} that no longer runs under it (a worker of an ended run)",
            None,
        )
    if session == 0:
        # Its session's leader is outside this container's pid namespace (`docker exec`, some notebook images): whether
        # that leader still runs cannot be seen from here, so it is not called gone.
        return None, "started outside this container's view (its session's leader is not visible here)"
    if session == own_session:
        return None, "started from this notebook"  # our session runs (we are in it), whether or not its leader still does
    leader_started = system.process_started_at(session)
    if leader_started is None or (started_at is not None and leader_started > started_at):  # gone, or its pid a newer process's
        launcher = _launcher(system, pid, arguments, session) if is_kernel(arguments) else None
        if launcher is not None:  # a kernel started without a session of its own (VS Code's), or its run: its launcher runs
            return None, (
                f"started by pid {launcher} ({_shortened(system.command_line(launcher), None)}), which still runs, without a "
                f"session of its own (its session's leader, {session}, has exited)"
            )
        sign = _kernel_sign(system, pid, arguments)
        if sign is not None:
            return f"the notebook kernel it was started from (session {session}) has exited ({sign})", None
        return None, (
            f"orphaned: the shell or program it was started from (session {session}) has exited, and nothing shows a notebook "
            "kernel started it (a job left running on purpose, such as `nohup python train.py &` over SSH?)"
        )
    leader = system.command_line(session)
    if arguments and arguments == leader and session not in _ancestors(system, pid):
        return f"a copy forked from {kernel_name(session, leader)} that no longer runs under it (a worker of an ended run)", None
    if is_kernel(leader):
        return None, "started from another notebook, " + kernel_name(session, leader)
    return None, f"started from pid {session} ({_shortened(leader, None)}), which still runs"


def _kernel_sign(system: SystemView, pid: int, arguments: tuple[str, ...]) -> str | None:
    """What shows that process `pid` was started from a notebook kernel, or None."""
    if is_kernel(arguments):
        return "it is a fork of that kernel: its command line"
    if KERNEL_MARK in system.process_environment(pid):
        return f"its environment holds the kernel's {KERNEL_MARK}"
    return None


def _launcher(system: SystemView, pid: int, arguments: tuple[str, ...], session: int) -> int | None:
    """What started the kernel that process `pid` is (or was forked from), when it still runs in their session: the first
    process above it with another command line. None when that is init or a process of another session: what adopted an
    orphan (a subreaper is in a session of its own), not what started it."""
    seen: set[int] = set()
    status = system.process_status(pid)
    while status is not None and status.parent > 1 and status.parent not in seen:
        seen.add(status.parent)
        if system.command_line(status.parent) != arguments:
            return status.parent if system.process_session(status.parent) == session else None
        status = system.process_status(status.parent)
    return None


def _ancestors(system: SystemView, pid: int) -> frozenset[int]:
    """The processes above `pid`, up to the first (pid 1, or the container's)."""
    found: set[int] = set()
    status = system.process_status(pid)
    # A parent pid that repeats can only come from a pid reused while we walked: stop there.
    while status is not None and status.parent > 0 and status.parent not in found:
        found.add(status.parent)
        status = system.process_status(status.parent)
    return frozenset(found)


def _shortened(arguments: tuple[str, ...], name: str | None) -> str:
    if not arguments:
        # Zombies and kernel threads have no command line; /proc/<pid>/comm still names them.
        return name or "unknown command"
    program, *rest = arguments
    text = shlex.join((PurePosixPath(program).name or program, *rest))  # "python3 train.py", not "/usr/local/bin/python3 train.py"
    return text if len(text) <= COMMAND_WIDTH else text[: COMMAND_WIDTH - 1] + "…"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
