"""`%tpu_release`: end the stale processes holding the TPU (SIGTERM, then SIGKILL), and say what was ended and what was left.

Stale: the notebook kernel it was started from is gone
(`runtime.device_holders`). A live holder (another notebook's kernel or
run, a `nohup` job started from a cell, an orphan nothing shows a notebook
started, such as `nohup python train.py &` over SSH) is listed with what it
is and ended only when named (`%tpu_release PID`) or with `--all`. Never the kernel or a process it runs
under, never another user's process, and never this kernel's running run
(stop it through its cell or handle). Every signal goes through
`basics.signals`: to the process chosen, and only while it still holds the
TPU.
"""

from __future__ import annotations

import html
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tpu_nb.basics.signals import Delivery, Target, send_signal
from tpu_nb.runtime.device_holders import DeviceHolder, Origin, describe_age, holds_tpu, tpu_device_holders
from tpu_nb.runtime.system import SystemView

TERM_GRACE = 3.0  # seconds a holder gets to exit after SIGTERM (a worker closing the TPU needs about a second)
KILL_WAIT = 5.0  # seconds for SIGKILLed holders to disappear
CPU_WINDOW = 1.0  # seconds over which a live holder's CPU use is measured, to tell a working one from an idle one
_POLL = 0.05

SignalWith = Callable[..., Delivery]
"""How a signal is sent: `basics.signals.send_signal` (tests wrap it to record what was sent)."""


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
    cpu_share: float | None = None
    """For a live holder: the share of one CPU it used over the last `CPU_WINDOW` seconds."""


@dataclass(frozen=True, slots=True)
class Release:
    """What `%tpu_release` did (or, in a dry run, would do)."""

    ended: tuple[Ended, ...]
    left: tuple[Left, ...]
    would_end: tuple[DeviceHolder, ...] = ()
    """In a dry run, the holders it would end; nothing was signalled."""
    not_holding: tuple[int, ...] = ()
    """Pids named that hold no TPU device file (nothing to end)."""


def release_tpu(
    system: SystemView,
    running: str | None,
    *,
    named: tuple[int, ...] = (),
    everything: bool = False,
    dry_run: bool = False,
    grace: float = TERM_GRACE,
    cpu_window: float = CPU_WINDOW,
    signal_with: SignalWith = send_signal,
) -> Release:
    """End the stale holders of the TPU's device files seen through `system`, the `named` pids, or with `everything` every one.

    `running` names this kernel's live run, if any: its processes are never ended here.
    """
    holders = tpu_device_holders(system)
    asked = {holder.pid for holder in holders if everything or holder.pid in named}
    left = [reason for holder in holders if (reason := _reason_to_leave(holder, system.own_uid, running, holder.pid in asked))]
    kept = {reason.holder.pid for reason in left}
    to_end = tuple(holder for holder in holders if holder.pid not in kept)
    not_holding = tuple(pid for pid in dict.fromkeys(named) if pid not in {holder.pid for holder in holders})
    left = _with_cpu_shares(system, left, cpu_window)
    if dry_run:
        return Release((), tuple(left), would_end=to_end, not_holding=not_holding)
    ended, not_ended = _end(system, to_end, grace, signal_with)
    return Release(ended, (*left, *not_ended), not_holding=not_holding)


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
        sections.append((heading, [f"{_left_name(left)}: {left.reason}. Fix: {left.fix}" for left in release.left]))
    if release.not_holding:
        pids = ", ".join(map(str, release.not_holding))
        sections.append((f"Not holding the TPU (nothing to end): pid {pids}", []))
    if not sections:
        text = "Nothing to release: no other process holds the TPU's device files."
        return text, f"<p>{html.escape(text)}</p>"
    text = "\n".join(line for heading, lines in sections for line in (heading, *(f"  {line}" for line in lines)))
    markup = "".join(
        f"<p><strong>{html.escape(heading)}</strong></p><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"
        for heading, lines in sections
    )
    return text, f'<div class="tpu-nb-release">{markup}</div>'


def _reason_to_leave(holder: DeviceHolder, own_uid: int, running: str | None, asked: bool) -> Left | None:
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
    if holder.origin is Origin.THIS_KERNEL and not asked:
        return Left(holder, f"{holder.origin_text}, not as a tpu_nb run", f"end it where you started it, or %tpu_release {holder.pid}")
    if holder.origin is Origin.ELSEWHERE and not holder.stale and not asked:
        return Left(holder, holder.origin_text, f"%tpu_release {holder.pid} ends it (%tpu_release --all: every live holder)")
    return None


def _with_cpu_shares(system: SystemView, left: list[Left], window: float) -> list[Left]:
    """The live holders among `left` with the CPU share each used over `window` seconds (measured only when there is one)."""
    live = [item.holder.pid for item in left if item.holder.origin is Origin.ELSEWHERE and item.holder.uid is not None]
    if not live or window <= 0:
        return left
    before = {pid: system.process_cpu_seconds(pid) for pid in live}
    time.sleep(window)
    shares = {}
    for pid, was in before.items():
        now = system.process_cpu_seconds(pid)
        shares[pid] = None if was is None or now is None else (now - was) / window
    return [replace(item, cpu_share=shares.get(item.holder.pid)) for item in left]


def _end(
    system: SystemView, holders: tuple[DeviceHolder, ...], grace: float, signal_with: SignalWith
) -> tuple[tuple[Ended, ...], tuple[Left, ...]]:
    """SIGTERM every holder, SIGKILL those still there after `grace` seconds, and wait for them to go."""
    termed, gone, refused = _signal_each(system, holders, signal.SIGTERM, signal_with)
    ended = [Ended(holder, None) for holder in gone]
    stubborn = _wait_for(system, termed, grace)
    ended += [Ended(holder, "SIGTERM") for holder in termed if holder not in stubborn]
    killed, went_meanwhile, refused_kill = _signal_each(system, stubborn, signal.SIGKILL, signal_with)
    ended += [Ended(holder, "SIGTERM") for holder in went_meanwhile]  # gone (or let go of the TPU) between the wait and the signal
    refused += refused_kill
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


def _signal_each(
    system: SystemView, holders: Sequence[DeviceHolder], signum: signal.Signals, signal_with: SignalWith
) -> tuple[list[DeviceHolder], list[DeviceHolder], list[Left]]:
    """Send `signum` to each holder: those it reached, those already gone (or no longer holding the TPU), those the OS refused."""
    reached: list[DeviceHolder] = []
    gone: list[DeviceHolder] = []
    refused: list[Left] = []
    for holder in holders:
        delivery = _signal(system, holder, signum, signal_with)
        if delivery in (Delivery.GONE, Delivery.NOT_A_TARGET):
            gone.append(holder)
        elif delivery is Delivery.REFUSED:
            refused.append(_refused(holder, signum))
        else:
            reached.append(holder)
    return reached, gone, refused


def _signal(system: SystemView, holder: DeviceHolder, signum: signal.Signals, signal_with: SignalWith) -> Delivery:
    """Send `signum` to the holder seen, only while it still holds the TPU (its pid may be another process's by now)."""
    return signal_with(Target(holder.pid, holder.started_at), signum, still_target=lambda: holds_tpu(system, holder.pid), system=system)


def _refused(holder: DeviceHolder, signum: signal.Signals) -> Left:
    return Left(holder, f"the system did not allow signalling it ({signum.name}: permission denied)", f"sudo kill {holder.pid}")


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


def _left_name(left: Left) -> str:
    """A holder left running; for a live one, what tells whether it works: its parent, age and CPU use."""
    holder = left.holder
    if holder.origin is not Origin.ELSEWHERE or holder.stale:
        return _name(holder)
    facts = [
        f"parent {holder.parent}" if holder.parent is not None else "",
        f"running {describe_age(holder.age)}" if holder.age is not None else "",
    ]
    if left.cpu_share is not None:
        facts.append(f"{left.cpu_share:.0%} of a CPU in the last {CPU_WINDOW:g}s")
    return f"{_name(holder)}, " + ", ".join(fact for fact in facts if fact)


def _processes(number: int) -> str:
    return f"{number} process{'' if number == 1 else 'es'}"
