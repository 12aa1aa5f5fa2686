"""What the kernel knows about a running training job, built from worker events.

Pure logic (stdlib only, injectable clock): renderers read `ProgressSnapshot`s
and never look inside `ProgressState`, so the dashboard, the terminal line and
the static summary all show the same facts.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tpu_nb.wire.events import CompileCause, Diagnosis, Event, Heartbeat, Notice, Progress, WorkerFinished, WorkerRaised, WorkerStarted

from ..status import RUN_STATUSES, RunStatus

WARMUP_STEPS = 5
"""Rank 0's first training steps, whose XLA compilations are expected."""

ONE_OFF_GRACE_STEPS = 3
"""Steps after an evaluation (or the first logged loss) whose compilations are not recompilations."""

RATE_WINDOW_SECONDS = 20.0
"""Steps/s is measured over this recent window, not since the start (which includes compilation)."""

STALE_AFTER_SECONDS = 30.0
"""A running worker silent for longer than this is probably stuck."""

MOST_CAUSES_SHOWN = 2
"""Recompilation causes named in the warning: the most frequent."""

TRAINING_LOSS = "loss"
VALIDATION_LOSS = "eval_loss"
LEARNING_RATE = "learning_rate"
EVAL_PREFIX = "eval_"

# Trainer logs these next to the metrics; they describe the run, not the model.
_BOOKKEEPING_NAMES = frozenset({"epoch", "step", "total_flos"})
_BOOKKEEPING_SUFFIXES = ("_runtime", "_samples_per_second", "_steps_per_second")

TRAIN_PHASE = "train"
EVAL_PHASE = "eval"
_PHASE_NAMES = {TRAIN_PHASE: "training", EVAL_PHASE: "evaluating"}

_FIX = (
    "pad inputs to a fixed length (padding='max_length', max_length=...) and drop the last "
    "partial batch (drop_last=True / dataloader_drop_last=True)"
)


@dataclass(frozen=True, slots=True)
class MetricRow:
    """The metric values logged at one step (one row of the table)."""

    step: int | None
    values: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker as last heard from."""

    rank: int
    device: str | None
    step: int | None
    phase: str  # its heartbeat phase, or "started", "finished", "failed"
    seconds_since_heard: float
    compile_count: int
    compile_seconds: float
    failure: str | None
    memory: tuple[int, int] | None = None  # device bytes (used, limit), where the device reports them
    cache: tuple[int, int] | None = None  # persistent compilation cache (hits, misses)

    @property
    def stale(self) -> bool:
        return self.phase not in ("finished", "failed") and self.seconds_since_heard > STALE_AFTER_SECONDS


@dataclass(frozen=True, slots=True)
class RecompilationWarning:
    """XLA kept compiling after warm-up: the input shapes change between steps.

    `count` is the most extra compilations on any one worker (every worker
    compiles the same program, so summing would multiply by the worker count).
    """

    count: int
    since_step: int
    ranks: tuple[int, ...]
    causes: tuple[CompileCause, ...] = ()  # the XLA doctor's explanations, most frequent first

    @property
    def text(self) -> str:
        plural = "" if self.count == 1 else "s"
        ranks = ", ".join(str(rank) for rank in self.ranks)
        rank_label = "rank" if len(self.ranks) == 1 else "ranks"
        headline = f"{self.count} XLA recompilation{plural} after warm-up since step {self.since_step} ({rank_label} {ranks})"
        if not self.causes:
            return f"{headline}: input shapes change between steps, and every new shape compiles a new graph. Fix: {_FIX}."
        explained = " ".join(
            f"Why: {cause.reason}{f' at {cause.place}' if cause.place else ''}. Fix: {cause.fix}." for cause in self.causes
        )
        return f"{headline}. {explained}"


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """Everything a renderer shows, frozen at one moment."""

    title: str
    runtime_label: str
    phase: str  # "starting", "compiling", "training", "evaluating", another worker phase, or a RunStatus
    detail: str | None
    step: int | None
    max_steps: int | None
    epoch: float | None
    elapsed: float
    steps_per_second: float | None
    samples_per_second: float | None
    eta: float | None
    history: tuple[MetricRow, ...]
    metric_names: tuple[str, ...]  # every metric logged, in first-seen order
    latest: Mapping[str, float]  # the last value of each metric
    workers: tuple[WorkerRow, ...]
    expected_workers: int
    warmed_up: bool
    recompilation: RecompilationWarning | None
    notices: tuple[str, ...]
    diagnoses: tuple[Diagnosis, ...] = ()  # the XLA doctor's findings, one per kind and place
    worker_noun: str = "rank"  # what a worker row stands for: a rank, or a pod run's host

    @property
    def memory(self) -> tuple[int, int] | None:
        """Device memory (bytes used, limit) of the fullest worker, where devices report it."""
        readings = [worker.memory for worker in self.workers if worker.memory is not None]
        return max(readings, key=lambda used_limit: used_limit[0] / max(used_limit[1], 1), default=None)

    @property
    def cache(self) -> tuple[int, int] | None:
        """Persistent compilation cache (hits, misses), summed over workers; None when off."""
        readings = [worker.cache for worker in self.workers if worker.cache is not None]
        if not readings:
            return None
        return sum(hits for hits, _ in readings), sum(misses for _, misses in readings)

    @property
    def finished(self) -> bool:
        return self.phase in RUN_STATUSES

    @property
    def fraction_done(self) -> float | None:
        if self.step is None or not self.max_steps:
            return None
        return min(self.step / self.max_steps, 1.0)

    @property
    def compile_count(self) -> int:
        """XLA compilations of the busiest worker (they all compile the same graphs)."""
        return max((worker.compile_count for worker in self.workers), default=0)

    @property
    def compile_seconds(self) -> float:
        return max((worker.compile_seconds for worker in self.workers), default=0.0)

    @property
    def failures(self) -> tuple[str, ...]:
        return tuple(f"rank {worker.rank}: {worker.failure}" for worker in self.workers if worker.failure)


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
        self._samples_per_step: int | None = None
        self._step_times: deque[tuple[float, int]] = deque()
        self._history: list[MetricRow] = []
        self._latest: dict[str, float] = {}
        self._metric_names: dict[str, None] = {}  # an ordered set
        self._workers: dict[int, _Worker] = {}
        self._notices: dict[str, None] = {}
        self._diagnoses: dict[str, Diagnosis] = {}
        self._compiles = _CompileWatch()

    def on_event(self, event: Event) -> None:
        """Take in one worker event (the kernel calls this in order, from one thread)."""
        if self._ended_at is not None:
            return  # the final snapshot must not change under the summary
        now = self.clock()
        if isinstance(event, Notice):
            self._notices.setdefault(event.text, None)
        if isinstance(event, Diagnosis):
            self._diagnoses[event.key] = event  # the freshest evidence, from whichever rank
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
            samples_per_second=(
                steps_per_second * self._samples_per_step if steps_per_second is not None and self._samples_per_step else None
            ),
            eta=None if finished else self._eta(steps_per_second),
            history=tuple(self._history),
            metric_names=tuple(self._metric_names),
            latest=MappingProxyType(dict(self._latest)),
            workers=tuple(worker.row(rank, now) for rank, worker in sorted(self._workers.items())),
            expected_workers=self._expected_workers,
            warmed_up=self._compiles.warmed_up(self._step),
            recompilation=self._compiles.warning(),
            notices=tuple(self._notices),
            diagnoses=tuple(self._diagnoses.values()),
            worker_noun=self.worker_noun,
        )

    def _on_heartbeat(self, event: Heartbeat, worker: _Worker, now: float) -> None:
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
        if event.samples_per_step is not None:
            self._samples_per_step = event.samples_per_step
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

    def _advance(self, step: int | None, now: float) -> None:
        if step is None or (self._step is not None and step <= self._step):
            return
        self._step = step
        self._compiles.on_rank0_step(step)
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
        )


@dataclass(frozen=True, slots=True)
class _CompileIncrease:
    """A worker's compile count grew between two heartbeats, sent at these steps."""

    rank: int
    amount: int
    after_step: int | None  # the earlier heartbeat's step (None: unknown, i.e. the start)
    seen_at_step: int


class _CompileWatch:
    """Tells expected XLA compilations from recompilations caused by changing shapes.

    Heartbeats arrive about once a second, so a compilation is only known to
    have happened between two heartbeats; it is excused when that span touches
    a time when new graphs are expected:
    - warm-up: rank 0's first WARMUP_STEPS training steps;
    - evaluation (compiles its own graphs) and ONE_OFF_GRACE_STEPS after it
      (the first training step after it may trace a slightly different graph);
    - the first step that logs the training loss (Trainer then adds, once,
      graphs that read and reset its loss accumulator).
    An increase is judged (once) when rank 0 is ONE_OFF_GRACE_STEPS past it, so
    an evaluation that rank 0 reports a little later still excuses it; ones
    still pending when the run ends (final logging, saving) are never counted.
    """

    def __init__(self) -> None:
        self._warmup_end: int | None = None  # the last warm-up step
        self._one_off_steps: set[int] = set()
        self._first_loss_logged = False
        self._last: dict[int, tuple[int, int | None]] = {}  # rank -> (compile count, step)
        self._pending: list[_CompileIncrease] = []
        self._extra_by_rank: dict[int, int] = {}
        self._first_extra_step: int | None = None
        self._causes: dict[CompileCause, int] = {}  # the doctor's causes of compilations after warm-up -> how often

    def on_first_training_step(self, step: int) -> None:
        self._warmup_end = step + WARMUP_STEPS - 1

    def on_one_off_graphs(self, step: int) -> None:
        self._one_off_steps.add(step)

    def on_loss_logged(self, step: int) -> None:
        if not self._first_loss_logged:
            self._first_loss_logged = True
            self._one_off_steps.add(step)

    def on_heartbeat(self, event: Heartbeat, rank0_step: int | None) -> None:
        # Workers in a hand-written loop may not know their step; rank 0's is close.
        step = event.step if event.step is not None else rank0_step
        if event.phase == EVAL_PHASE and step is not None:
            self._one_off_steps.add(step)
        # The doctor explains only compilations after its own warm-up; a heartbeat's
        # causes may belong to a neighbouring heartbeat's count, so they are pooled.
        for cause in event.causes:
            self._causes[cause] = self._causes.get(cause, 0) + 1
        previous = self._last.get(event.rank)
        self._last[event.rank] = (event.compile_count, step)
        # A worker's first heartbeat only sets its baseline: its earlier compilations are start-up.
        if previous is None or step is None or event.compile_count <= previous[0]:
            return
        previous_count, previous_step = previous
        after_step = None if previous_step is None else min(previous_step, step)
        self._pending.append(_CompileIncrease(event.rank, event.compile_count - previous_count, after_step, step))

    def on_rank0_step(self, rank0_step: int) -> None:
        """Judge the increases rank 0 is now far enough past."""
        settled = [increase for increase in self._pending if rank0_step > increase.seen_at_step + ONE_OFF_GRACE_STEPS]
        self._pending = [increase for increase in self._pending if rank0_step <= increase.seen_at_step + ONE_OFF_GRACE_STEPS]
        for increase in settled:
            if self._is_recompilation(increase):
                self._extra_by_rank[increase.rank] = self._extra_by_rank.get(increase.rank, 0) + increase.amount
                if self._first_extra_step is None or increase.seen_at_step < self._first_extra_step:
                    self._first_extra_step = increase.seen_at_step

    def warmed_up(self, rank0_step: int | None) -> bool:
        return self._warmup_end is not None and rank0_step is not None and rank0_step >= self._warmup_end

    def warning(self) -> RecompilationWarning | None:
        if self._first_extra_step is None:
            return None
        causes = tuple(sorted(self._causes, key=lambda cause: -self._causes[cause])[:MOST_CAUSES_SHOWN])
        return RecompilationWarning(max(self._extra_by_rank.values()), self._first_extra_step, tuple(sorted(self._extra_by_rank)), causes)

    def _is_recompilation(self, increase: _CompileIncrease) -> bool:
        if self._warmup_end is None or increase.after_step is None or increase.after_step < self._warmup_end:
            return False
        return not any(
            start <= increase.seen_at_step and increase.after_step <= start + ONE_OFF_GRACE_STEPS for start in self._one_off_steps
        )


def _is_number(value: object) -> bool:
    # A malformed metric must not break the display (an observer error stops the run).
    return isinstance(value, (int, float)) and not isinstance(value, bool)
