"""A run's events, as the progress tests feed them: two ranks, rank 0's steps, evaluations."""

from __future__ import annotations

from support.clock import FakeClock

from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.wire.events import Counted, Heartbeat, Progress, WorkerStarted

RANKS = (0, 1)


def start(progress: ProgressState, compile_count: int = 0) -> None:
    for rank in RANKS:
        progress.on_event(WorkerStarted(rank, len(RANKS), 100 + rank, f"xla:{rank}"))
    for rank in RANKS:
        progress.on_event(Heartbeat(rank, 0, "train", compile_count, 0.0))


def train_step(
    progress: ProgressState,
    clock: FakeClock,
    step: int,
    compile_count: int,
    metrics: dict[str, float] | None = None,
    seconds: float = 0.5,
    compiled: bool = False,
) -> None:
    """One training step of 64 samples of 128 tokens: rank 0's Progress (its counts stamped with the clock as the worker's),
    then every rank's heartbeat (`compiled`: the step compiled on every rank)."""
    clock.advance(seconds)
    counted = Counted(clock.now, step * 64 * 128, step * 64)
    progress.on_event(Progress(0, step, metrics or {}, max_steps=200, epoch=step / 50, phase="train", counted=counted))
    for rank in RANKS:
        steps = ((step, step),) if compiled else ()
        progress.on_event(Heartbeat(rank, step, "train", compile_count, 2.0 * compile_count, compiled_steps=steps))


def evaluate(progress: ProgressState, clock: FakeClock, step: int, compile_count: int) -> None:
    """A Trainer evaluation at `step` that compiles its own graphs."""
    clock.advance(2.0)
    progress.on_event(Progress(0, step, {}, phase="eval"))
    for rank in RANKS:
        progress.on_event(Heartbeat(rank, step, "eval", compile_count, 2.0 * compile_count))
    clock.advance(2.0)
    metrics = {"eval_loss": 0.5, "eval_accuracy": 0.8, "eval_runtime": 4.0, "eval_samples_per_second": 99.0}
    progress.on_event(Progress(0, step, metrics, epoch=step / 50, phase="eval"))
