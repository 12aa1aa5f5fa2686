"""The kernel's side of the watchdog: on a stall (or when asked), every rank's place and a verdict, as one `StackReport`.

A `StallWatch` keeps a run's events in a `StallRecord` (each rank's
process and thread, its step, when its process was last heard) and asks
every worker process for its stacks through their dump files when a rank's
watchdog speaks, when a process has gone silent (its heartbeat thread
cannot run: the interpreter is held in C++), or when the user asks
(`run.stacks()`, the button).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from tpu_nb.basics.units import format_duration
from tpu_nb.kernel.stalls.folding import fold_process
from tpu_nb.kernel.stalls.record import StallRecord, of_ranks, ranks_text
from tpu_nb.kernel.stalls.verdicts import judge
from tpu_nb.wire.events import Event, Stalled
from tpu_nb.wire.stacks import StackReport, WatchdogSetting
from tpu_nb.workers.stalls.stack_dumps import request_stacks


class StallWatch:
    """Per run: where every rank is, on a stall, a silence, or on demand."""

    def __init__(
        self,
        exchange_dir: Path,
        setting: WatchdogSetting | None,
        clock: Callable[[], float] = time.monotonic,
        chips: Callable[[int], str | None] | None = None,
    ) -> None:
        """`chips`: a rank's chip figures (duty cycle, HBM) where the runtime's metrics can be read."""
        self._exchange_dir = exchange_dir
        self._chips = chips
        self._asking = threading.Lock()  # one request at a time: the dump files are emptied and read per request
        self._record: StallRecord[int, int] = StallRecord(setting, lambda pid: pid, clock)  # each process is its own source

    def on_event(self, event: Event) -> None:
        self._record.follow(event, lambda number: number)
        rank = getattr(event, "rank", None)
        pid = None if rank is None else self._record.process_of(rank)
        if pid is not None:
            self._record.heard(pid)

    def report(self, reason: str, stall: Stalled | None = None) -> StackReport:
        """Every running rank's place now, and the verdict (takes up to a few seconds: each process is signalled)."""
        threads = self._record.running()
        steps = self._record.steps()
        with self._asking:
            answers = request_stacks(self._exchange_dir, threads)
        places = sorted((place for answer in answers for place in fold_process(answer, threads[answer.pid], steps)), key=lambda p: p.rank)
        unanswered = tuple(f"pid {answer.pid}{of_ranks(threads[answer.pid])}: {answer.problem}" for answer in answers if answer.problem)
        verdict = judge(places, stall)
        chips = None
        if self._chips is not None:
            chips = "; ".join(text for place in places if (text := self._chips(place.rank)) is not None) or None
        return StackReport(reason, tuple(places), verdict.text, verdict.fix, unanswered, chips)

    def on_stall(self, stall: Stalled) -> StackReport | None:
        """The report for a rank's stall, or None when one was made within its threshold (the same stall, seen by another rank)."""
        if not self._record.new_stall(stall.threshold):
            return None
        return self.report(stall_reason(stall), stall)

    def silent_process(self) -> StackReport | None:
        """A report when a worker process has sent nothing for longer than the threshold allows (once per silence)."""
        silence = self._record.silent()
        if silence is None:
            return None
        ranks = ranks_text(rank for pid in silence.sources for rank in self._record.ranks_in(pid).values())
        return self.report(
            f"rank {ranks} sent nothing for over {format_duration(silence.seconds)}: its interpreter is held (in C++, or in the OS)"
        )


def stall_reason(stall: Stalled) -> str:
    """ "rank 1's step has not moved for 65s (the watchdog waits 60s; --watchdog sets it)"."""
    compiling = "" if stall.compiling is None else f", compiling for {format_duration(stall.compiling)}"
    return (
        f"rank {stall.rank}'s step has not moved for {format_duration(stall.seconds)}{compiling} "
        f"(the watchdog waits {format_duration(stall.threshold)}; --watchdog sets it)"
    )
