"""The kernel's side of the watchdog: on a stall (or when asked), every rank's place and a verdict, as one `StackReport`.

A `StallWatch` follows a run's events for what it needs (each rank's
process and thread, its step, when it was last heard) and asks every
worker process for its stacks when a rank's watchdog speaks, when a
process has gone silent (its heartbeat thread cannot run: the interpreter
is held in C++), or when the user asks (`run.stacks()`, the button).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from tpu_nb.kernel.stalls.folding import fold_process
from tpu_nb.kernel.stalls.verdicts import judge
from tpu_nb.wire.events import Event, Heartbeat, Progress, Stalled, WorkerFinished, WorkerRaised, WorkerStarted
from tpu_nb.wire.stacks import MIN_THRESHOLD, StackReport, WatchdogSetting
from tpu_nb.wire.units import format_duration
from tpu_nb.workers.stalls.stack_dumps import request_stacks

SILENT_EXTRA = 10.0
"""A process silent this much longer than the threshold has a heartbeat thread that cannot run: its stacks are asked for."""


class StallWatch:
    """Per run: where every rank is, on a stall, a silence, or on demand."""

    def __init__(
        self,
        run_dir: Path,
        setting: WatchdogSetting | None,
        clock: Callable[[], float] = time.monotonic,
        chips: Callable[[int], str | None] | None = None,
    ) -> None:
        """`chips`: a rank's chip figures (duty cycle, HBM) where the runtime's metrics can be read."""
        self._run_dir = run_dir
        self._chips = chips
        self._setting = setting
        self._clock = clock
        self._lock = threading.Lock()
        self._asking = threading.Lock()  # one request at a time: the dump files are emptied and read per request
        self._ranks_by_thread: dict[int, dict[int, int]] = {}  # pid -> {thread id -> rank}
        self._steps: dict[int, int | None] = {}
        self._heard: dict[int, float] = {}  # pid -> when it last sent anything
        self._done: set[int] = set()  # ranks that finished or raised
        self._silence_said: set[int] = set()
        self._reported_at: float | None = None  # the last stall's report: the other ranks' watchdogs speak of the same stall

    def on_event(self, event: Event) -> None:
        rank = getattr(event, "rank", None)
        with self._lock:
            if isinstance(event, WorkerStarted):
                self._ranks_by_thread.setdefault(event.pid, {})[event.thread] = event.rank
                self._steps.setdefault(event.rank, None)
            if isinstance(event, (Heartbeat, Progress, Stalled)) and event.step is not None:
                self._steps[event.rank] = event.step
            if isinstance(event, (WorkerFinished, WorkerRaised)):
                self._done.add(event.rank)
            pid = self._pid_of(rank)
            if pid is not None:
                self._heard[pid] = self._clock()
                self._silence_said.discard(pid)

    def report(self, reason: str, stall: Stalled | None = None) -> StackReport:
        """Every running rank's place now, and the verdict (takes up to a few seconds: each process is signalled)."""
        with self._lock:
            threads = {pid: dict(ranks) for pid, ranks in self._ranks_by_thread.items() if set(ranks.values()) - self._done}
            steps = dict(self._steps)
        with self._asking:
            answers = request_stacks(self._run_dir, threads)
        places = sorted((place for answer in answers for place in fold_process(answer, threads[answer.pid], steps)), key=lambda p: p.rank)
        unanswered = tuple(
            f"pid {answer.pid} (rank {_ranks(threads[answer.pid])}): {answer.problem}" for answer in answers if answer.problem
        )
        verdict = judge(places, stall)
        chips = None
        if self._chips is not None:
            chips = "; ".join(text for place in places if (text := self._chips(place.rank)) is not None) or None
        return StackReport(reason, tuple(places), verdict.text, verdict.fix, unanswered, chips)

    def on_stall(self, stall: Stalled) -> StackReport | None:
        """The report for a rank's stall, or None when one was made within its threshold (the same stall, seen by another rank)."""
        now = self._clock()
        if self._reported_at is not None and now - self._reported_at < stall.threshold:
            return None
        self._reported_at = now
        return self.report(stall_reason(stall), stall)

    def silent_process(self) -> StackReport | None:
        """A report when a worker process has sent nothing for longer than the threshold allows (once per silence)."""
        if self._setting is None:
            return None
        limit = (self._setting.seconds or MIN_THRESHOLD) + SILENT_EXTRA
        now = self._clock()
        with self._lock:
            silent = [
                pid
                for pid, heard in self._heard.items()
                if now - heard > limit and pid not in self._silence_said and set(self._ranks_by_thread[pid].values()) - self._done
            ]
            self._silence_said.update(silent)
        if not silent:
            return None
        ranks = ", ".join(_ranks(self._ranks_by_thread[pid]) for pid in silent)
        return self.report(f"rank {ranks} sent nothing for over {format_duration(limit)}: its interpreter is held (in C++, or in the OS)")

    def _pid_of(self, rank: int | None) -> int | None:
        if rank is None:
            return None
        return next((pid for pid, ranks in self._ranks_by_thread.items() if rank in ranks.values()), None)


def stall_reason(stall: Stalled) -> str:
    """ "rank 1's step has not moved for 65s (the watchdog waits 60s; --watchdog sets it)"."""
    compiling = "" if stall.compiling is None else f", compiling for {format_duration(stall.compiling)}"
    return (
        f"rank {stall.rank}'s step has not moved for {format_duration(stall.seconds)}{compiling} "
        f"(the watchdog waits {format_duration(stall.threshold)}; --watchdog sets it)"
    )


def _ranks(ranks_by_thread: dict[int, int]) -> str:
    return ", ".join(str(rank) for rank in sorted(ranks_by_thread.values()))
