"""The callback tpu_nb adds to every Trainer in a worker (imports transformers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from tpu_nb.wire.checkpoints import RECORD
from tpu_nb.wire.events import Progress

from . import reporting
from .checkpointing import Checkpointer


class TpuNbCallback(TrainerCallback):
    """Sends a Trainer's progress and logs to the kernel (rank 0) and steps for heartbeats (all ranks)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, args, "train", always=True)
        checkpointer = _checkpointer()
        if checkpointer is not None and state.is_world_process_zero and kwargs.get("model") is not None:
            checkpointer.remember_start(kwargs["model"])

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, args, "train")
        reporter = reporting.current()
        if reporter is not None and reporter.should_stop(state.global_step):
            # Graceful stop: Trainer ends after this step and saves a
            # checkpoint (from the master, through xm.save on XLA).
            control.should_training_stop = True
            control.should_save = True
        checkpointer = _checkpointer()
        if checkpointer is None:
            return
        if checkpointer.plan.every.seconds is not None and (checkpointer.due(state.global_step) or state.global_step >= state.max_steps):
            control.should_save = True  # --every by time: the Trainer saves at this step's end (and at the last, as by steps)
        if control.should_save and state.is_world_process_zero:
            # A resume can save a step again whose earlier checkpoint was damaged: its old record must not vouch for the new files.
            (Path(args.output_dir) / f"checkpoint-{state.global_step}" / RECORD).unlink(missing_ok=True)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        reporter = reporting.current()
        if reporter is None or reporter.checkpointer is None or not state.is_world_process_zero or kwargs.get("model") is None:
            return
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        reporter.checkpointer.verify_trainer_checkpoint(path, kwargs["model"], state.global_step, reporter.history)

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


def _checkpointer() -> Checkpointer | None:
    reporter = reporting.current()
    return None if reporter is None else reporter.checkpointer


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
