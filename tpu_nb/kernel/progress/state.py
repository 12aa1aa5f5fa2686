"""The kernel's fold of a run's worker events into what it knows: `ProgressState`, read as `ProgressSnapshot`s.

Pure logic (stdlib only, injectable clock): this is where `report()`'s and
a Trainer's `Progress` events, and every rank's heartbeats, become the
history, rates and worker rows the dashboard's chart and table show (its
speed, tokens/s and MFU, through `throughput`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from types import MappingProxyType

from tpu_nb.basics.units import format_bytes
from tpu_nb.kernel.endings.status import RUN_STATUSES, RunStatus
from tpu_nb.kernel.progress.recompilation import EVAL_PHASE, CompileJudge
from tpu_nb.kernel.progress.snapshot import EVAL_PREFIX, TRAINING_LOSS, MetricRow, ProgressSnapshot, WorkerRow
from tpu_nb.kernel.progress.throughput import Basis, ThroughputMeter
from tpu_nb.wire.events import (
    CheckpointSaved,
    ChipFigures,
    Diagnosis,
    Event,
    Heartbeat,
    History,
    Notice,
    Progress,
    WorkerFinished,
    WorkerRaised,
    WorkerStarted,
)
from tpu_nb.wire.stacks import StackReport

RATE_WINDOW_SECONDS = 20.0
"""Steps/s is measured over this recent window, not since the start (which includes compilation)."""

# Trainer logs these next to the metrics; they describe the run, not the model.
_BOOKKEEPING_NAMES = frozenset({"epoch", "step", "total_flos"})
_BOOKKEEPING_SUFFIXES = ("_runtime", "_samples_per_second", "_steps_per_second")

TRAIN_PHASE = "train"
_PHASE_NAMES = {TRAIN_PHASE: "training", EVAL_PHASE: "evaluating"}


def _is_bookkeeping(name: str) -> bool:
    """True for Trainer log entries that describe the run rather than the model."""
    return name in _BOOKKEEPING_NAMES or name.endswith(_BOOKKEEPING_SUFFIXES)


class ProgressState:
    """Folds a run's events into its current state; `snapshot()` reads it."""

    def __init__(
        self,
        title: str,
        runtime_label: str,
        expected_workers: int,
        clock: Callable[[], float] = time.monotonic,
        worker_noun: str = "rank",
        basis: Basis | None = None,
    ) -> None:
        self.title = title
        self.worker_noun = worker_noun
        self.runtime_label = runtime_label
        self.clock = clock
        self._expected_workers = expected_workers
        self._started_at = clock()
        self._ended_at: float | None = None
        self._phase = "starting"
        self._detail: str | None = None
        self._first_step_seen = False
        self._step: int | None = None
        self._max_steps: int | None = None
        self._epoch: float | None = None
        self._throughput = ThroughputMeter(basis)
        self._step_times: deque[tuple[float, int]] = deque()
        self._history: list[MetricRow] = []
        self._latest: dict[str, float] = {}
        self._metric_names: dict[str, None] = {}  # an ordered set
        self._workers: dict[int, _Worker] = {}
        self._notices: dict[str, None] = {}
        self._diagnoses: dict[str, Diagnosis] = {}
        self._checkpoint: str | None = None
        self._resumed_rows = 0
        self._compiles = CompileJudge()
        self._stall: StackReport | None = None  # the watchdog's report, until the ranks in it move again

    def on_event(self, event: Event) -> None:
        """Take in one worker event (the kernel calls this in order, from one thread)."""
        if self._ended_at is not None:
            return  # the final snapshot must not change under the summary
        now = self.clock()
        self._throughput.on_event(event)
        if isinstance(event, Notice):
            self._notices.setdefault(event.text, None)
        if isinstance(event, Diagnosis):
            self._diagnoses[event.key] = event  # the freshest evidence, from whichever rank
        if isinstance(event, CheckpointSaved):
            self._on_checkpoint(event)
        if isinstance(event, History):
            self._on_history(event)
        if isinstance(event, StackReport):
            self._stall = event
        if isinstance(event, ChipFigures):  # read in the kernel: it says nothing of whether the worker is alive
            if event.rank in self._workers:
                self._workers[event.rank].chip = event.text
            return
        rank = getattr(event, "rank", None)
        if rank is None:
            return
        # Any event, printed output included, shows that the worker is alive.
        worker = self._workers.get(rank)
        if worker is None:
            worker = self._workers[rank] = _Worker(now)
        worker.heard_at = now
        if isinstance(event, WorkerStarted):
            worker.device = event.device
            self._expected_workers = event.world_size
            if self._phase == "starting":
                self._phase = "compiling"
        elif isinstance(event, WorkerFinished):
            worker.phase = "finished"
        elif isinstance(event, WorkerRaised):
            worker.phase = "failed"
            worker.failure = event.summary
        elif isinstance(event, Heartbeat):
            self._on_heartbeat(event, worker, now)

        elif isinstance(event, Progress):
            if event.step is not None:
                worker.step = event.step  # fresher than its last heartbeat
            self._on_progress(event, now)

    def finish(self, status: RunStatus, detail: str | None = None) -> None:
        """Freeze the run with its final status (and what went wrong, if anything)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
        self._phase = status
        self._detail = detail
        self._ended_at = self.clock()

    def snapshot(self) -> ProgressSnapshot:
        now = self._ended_at if self._ended_at is not None else self.clock()
        steps_per_second = self._steps_per_second()
        finished = self._ended_at is not None
        return ProgressSnapshot(
            title=self.title,
            runtime_label=self.runtime_label,
            phase=self._phase,
            detail=self._detail,
            step=self._step,
            max_steps=self._max_steps,
            epoch=self._epoch,
            elapsed=now - self._started_at,
            steps_per_second=steps_per_second,
            throughput=self._throughput.overall() if finished else self._throughput.live(),
            eta=None if finished else self._eta(steps_per_second),
            history=tuple(self._history),
            metric_names=tuple(self._metric_names),
            latest=MappingProxyType(dict(self._latest)),
            workers=tuple(worker.row(rank, now) for rank, worker in sorted(self._workers.items())),
            expected_workers=self._expected_workers,
            compiles=self._compiles.verdict(self._step, final=finished),
            notices=tuple(self._notices),
            diagnoses=tuple(self._diagnoses.values()),
            worker_noun=self.worker_noun,
            checkpoint=self._checkpoint,
            stall=self._stall,
        )

    def _on_heartbeat(self, event: Heartbeat, worker: _Worker, now: float) -> None:
        if self._stall is not None and _moved_since(self._stall, event.rank, event.step):
            self._notices.setdefault(f"rank {event.rank} moved again (step {event.step}) after the watchdog's report", None)
            self._stall = None
        worker.step = event.step
        if worker.phase not in ("finished", "failed"):  # a heartbeat can trail the end
            worker.phase = event.phase
        worker.compile_count = event.compile_count
        worker.compile_seconds = event.compile_seconds
        worker.memory = event.memory
        worker.cache = event.cache
        if event.rank == 0 and self._first_step_seen:  # before it, rank 0 is still compiling step 1
            self._advance(event.step, now)
            self._set_phase(event.phase)
        self._compiles.on_heartbeat(event, self._step)

    def _on_progress(self, event: Progress, now: float) -> None:
        metrics = {name: value for name, value in event.metrics.items() if _is_number(value)}
        epoch = event.epoch if event.epoch is not None else metrics.get("epoch")
        metrics = {name: value for name, value in metrics.items() if not _is_bookkeeping(name)}
        if event.max_steps is not None:
            self._max_steps = event.max_steps
        if epoch is not None:
            self._epoch = epoch
        training = event.phase in (None, TRAIN_PHASE)
        if event.step is not None:
            if training and not self._first_step_seen:
                self._first_step_seen = True
                self._compiles.on_first_training_step(event.step)
            self._advance(event.step, now)
        if self._first_step_seen:
            self._set_phase(event.phase or TRAIN_PHASE)
        step = event.step if event.step is not None else self._step
        if step is not None and (event.phase == EVAL_PHASE or any(name.startswith(EVAL_PREFIX) for name in metrics)):
            self._compiles.on_one_off_graphs(step)
        if training and step is not None and TRAINING_LOSS in metrics:
            self._compiles.on_loss_logged(step)
        if metrics:
            self._log(step, metrics)

    def _on_checkpoint(self, event: CheckpointSaved) -> None:
        if event.verified:
            self._checkpoint = (
                f"checkpoint at step {event.step} verified ({format_bytes(event.size)}, {event.seconds:.1f}s; "
                f"the step waited {event.stall_seconds:.1f}s)"
            )
        else:
            # Kept in the notices: a checkpoint that failed its check must not scroll away.
            self._notices.setdefault(
                f"the checkpoint at step {event.step} failed its check: {event.problem}; the previous verified one is kept", None
            )

    def _on_history(self, event: History) -> None:
        """A resumed run's curve so far, before what this run logs."""
        earlier = [MetricRow(step, MappingProxyType(dict(metrics))) for step, metrics in event.rows]
        self._history[self._resumed_rows : self._resumed_rows] = earlier  # pieces arrive in order, before or among this run's rows
        self._resumed_rows += len(earlier)
        for _step, metrics in event.rows:
            for name in metrics:
                self._metric_names.setdefault(name, None)

    def _advance(self, step: int | None, now: float) -> None:
        if step is None or (self._step is not None and step <= self._step):
            return
        self._step = step
        if not self._first_step_seen:
            return  # before the first step the rate would include compilation
        self._step_times.append((now, step))
        # Keep one sample older than the window as its anchor, so sparse steps still give a rate.
        while len(self._step_times) > 1 and self._step_times[1][0] <= now - RATE_WINDOW_SECONDS:
            self._step_times.popleft()

    def _set_phase(self, worker_phase: str) -> None:
        self._phase = _PHASE_NAMES.get(worker_phase, worker_phase)

    def _log(self, step: int | None, metrics: dict[str, float]) -> None:
        self._latest.update(metrics)
        for name in metrics:
            self._metric_names.setdefault(name, None)
        last = self._history[-1] if self._history else None
        if last is not None and last.step == step:
            # Trainer logs training and evaluation metrics of one step separately: one row.
            metrics = {**last.values, **metrics}
            if metrics == dict(last.values):
                return
            self._history.pop()
        self._history.append(MetricRow(step, MappingProxyType(metrics)))

    def _steps_per_second(self) -> float | None:
        if len(self._step_times) < 2:
            return None
        (first_time, first_step), (last_time, last_step) = self._step_times[0], self._step_times[-1]
        if last_time <= first_time:
            return None
        return (last_step - first_step) / (last_time - first_time)

    def _eta(self, steps_per_second: float | None) -> float | None:
        if not steps_per_second or self._max_steps is None or self._step is None:
            return None
        return max(self._max_steps - self._step, 0) / steps_per_second


class _Worker:
    """Mutable per-rank state behind a `WorkerRow`."""

    def __init__(self, heard_at: float) -> None:
        self.device: str | None = None
        self.step: int | None = None
        self.phase = "started"
        self.heard_at = heard_at
        self.compile_count = 0
        self.compile_seconds = 0.0
        self.failure: str | None = None
        self.memory: tuple[int, int] | None = None
        self.cache: tuple[int, int] | None = None
        self.chip: str | None = None

    def row(self, rank: int, now: float) -> WorkerRow:
        return WorkerRow(
            rank=rank,
            device=self.device,
            step=self.step,
            phase=self.phase,
            seconds_since_heard=now - self.heard_at,
            compile_count=self.compile_count,
            compile_seconds=self.compile_seconds,
            failure=self.failure,
            memory=self.memory,
            cache=self.cache,
            chip=self.chip,
        )


def _moved_since(report: StackReport, rank: int, step: int | None) -> bool:
    """True when `rank` is at another step than the report found it at."""
    return any(place.rank == rank and place.step != step and step is not None for place in report.ranks)


def _is_number(value: object) -> bool:
    # A malformed metric must not break the display (an observer error stops the run).
    return isinstance(value, (int, float)) and not isinstance(value, bool)
