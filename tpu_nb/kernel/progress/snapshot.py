"""What a renderer shows of a run, frozen at one moment: the snapshot the dashboard, the text line and the summary read.

Renderers read `ProgressSnapshot`s only (never the state that folds the
events), so every view shows the same facts; the metric names here are the
ones they treat specially.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tpu_nb.kernel.endings.status import RUN_STATUSES
from tpu_nb.kernel.progress.recompilation import CompileVerdict
from tpu_nb.kernel.progress.throughput import Throughput
from tpu_nb.wire.events import Diagnosis
from tpu_nb.wire.stacks import StackReport

STALE_AFTER_SECONDS = 30.0
"""A running worker silent for longer than this is probably stuck."""

TRAINING_LOSS = "loss"
VALIDATION_LOSS = "eval_loss"
LEARNING_RATE = "learning_rate"
EVAL_PREFIX = "eval_"


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
    chip: str | None = None  # its TPU chip's duty cycle and HBM, where libtpu's metrics can be read

    @property
    def stale(self) -> bool:
        return self.phase not in ("finished", "failed") and self.seconds_since_heard > STALE_AFTER_SECONDS


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
    eta: float | None
    history: tuple[MetricRow, ...]
    metric_names: tuple[str, ...]  # every metric logged, in first-seen order
    latest: Mapping[str, float]  # the last value of each metric
    workers: tuple[WorkerRow, ...]
    expected_workers: int
    compiles: CompileVerdict  # compile health: did the steps after warm-up compile again?
    notices: tuple[str, ...]
    diagnoses: tuple[Diagnosis, ...] = ()  # the XLA doctor's findings, one per kind and place
    worker_noun: str = "rank"  # what a worker row stands for: a rank, or a pod run's host
    checkpoint: str | None = None  # the newest checkpoint, e.g. "checkpoint at step 500 verified (11.7 MiB, 0.8s)"
    stall: StackReport | None = None  # where every rank was when the watchdog spoke, until they move again
    throughput: Throughput = field(
        default_factory=Throughput
    )  # tokens/s, samples/s, MFU, the step's time split: live, or the run's at its end

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
