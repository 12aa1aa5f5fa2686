"""The callback tpu_nb adds to every Trainer in a worker (imports transformers)."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from tpu_nb.wire.events import Progress

from . import reporting


class TpuNbCallback(TrainerCallback):
    """Sends a Trainer's progress and logs to the kernel (rank 0) and steps for heartbeats (all ranks)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, args, "train", always=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, args, "train")
        reporter = reporting.current()
        if reporter is not None and reporter.should_stop(state.global_step):
            # Graceful stop: Trainer ends after this step and saves a
            # checkpoint (from the master, through xm.save on XLA).
            control.should_training_stop = True
            control.should_save = True

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, args, "eval")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, args, "train")

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        numbers = {name: float(value) for name, value in (logs or {}).items() if isinstance(value, (int, float))}
        phase = "eval" if any(name.startswith("eval_") for name in numbers) else "train"
        _send(state, args, numbers, phase)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, args, "train", always=True)


def _note(state: Any, args: Any, phase: str, always: bool = False) -> None:
    """Record the step for the heartbeat; send progress when it is due."""
    reporter = reporting.current()
    if reporter is None:
        return
    reporter.step(state.global_step, phase)
    if always or reporter.due():
        _send(state, args, {}, phase)


def _send(state: Any, args: Any, metrics: dict[str, float], phase: str) -> None:
    reporter = reporting.current()
    if reporter is None or not state.is_world_process_zero:
        return
    samples = args.per_device_train_batch_size * args.world_size if phase == "train" else None
    reporter.send_progress(Progress(0, state.global_step, metrics, state.max_steps, state.epoch, phase, samples))
