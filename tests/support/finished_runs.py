"""Finished runs as the dashboard, the chart and the summary see them, for their tests."""

from __future__ import annotations

from support.clock import FakeClock

from tpu_nb.kernel.progress.snapshot import ProgressSnapshot
from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.wire.events import Heartbeat, Notice, Progress, WorkerStarted

PNG_SIGNATURE = b"\x89PNG"


def finished_run(
    metrics_at: dict[int, dict[str, float]],
    *,
    title: str = "%%tpu_train",
    status: str = "done",
    detail: str | None = None,
    notice: str | None = None,
) -> ProgressSnapshot:
    """A two-worker run of 30 steps that logged `metrics_at[step]`."""
    clock = FakeClock()
    progress = ProgressState(title, "Colab TPU v2-8", 2, clock=clock)
    for rank in (0, 1):
        progress.on_event(WorkerStarted(rank, 2, 100 + rank, f"xla:{rank}"))
    if notice is not None:
        progress.on_event(Notice(0, notice))
    for step in range(1, 31):
        clock.advance(1.0)
        progress.on_event(Progress(0, step, metrics_at.get(step, {}), max_steps=30, phase="train"))
        for rank in (0, 1):
            progress.on_event(Heartbeat(rank, step, "train", 4, 15.0))
    progress.finish(status, detail)  # type: ignore[arg-type]
    return progress.snapshot()


def training_metrics() -> dict[int, dict[str, float]]:
    metrics = {step: {"loss": 2.0 / step, "learning_rate": 5e-5 * (1 - step / 30)} for step in range(5, 31, 5)}
    for step in (15, 30):
        metrics[step] |= {"eval_loss": 1.0 / step, "eval_accuracy": step / 40}
    return metrics
