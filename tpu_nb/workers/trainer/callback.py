"""The callback tpu_nb adds to every Trainer in a worker (imports transformers)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from tpu_nb.wire.checkpoints import RECORD
from tpu_nb.wire.events import Counted, Progress
from tpu_nb.workers.cell_api import reporting
from tpu_nb.workers.checkpoints.saving import Checkpointer

if TYPE_CHECKING:
    from tpu_nb.workers.trainer.trainer_checkpoints import TrainerCheckpoints


class TpuNbCallback(TrainerCallback):
    """Sends a Trainer's progress and logs to the kernel (rank 0) and steps for heartbeats (all ranks); under
    --checkpoint, has each of its checkpoints checked (`checkpoints`: where the Trainer writes them)."""

    def __init__(self, checkpoints: TrainerCheckpoints | None = None) -> None:
        self.checkpoints = checkpoints

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, "train", always=True)
        checkpointer = _checkpointer()
        if checkpointer is not None and state.is_world_process_zero and kwargs.get("model") is not None:
            checkpointer.remember_start(kwargs["model"])

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, "train")
        reporter = reporting.current()
        if reporter is not None and reporter.should_stop(state.global_step):
            # Graceful stop: Trainer ends after this step and saves a
            # checkpoint (from the master, through xm.save on XLA).
            control.should_training_stop = True
            control.should_save = True
        checkpointer = _checkpointer()
        if checkpointer is not None and self.checkpoints is not None:
            self._checkpoint_at_step_end(args, state, control, checkpointer)
        _mark_long_phase(state, control)

    def _checkpoint_at_step_end(self, args: Any, state: Any, control: Any, checkpointer: Checkpointer) -> None:
        assert self.checkpoints is not None
        every = checkpointer.plan.every.seconds
        reporter = reporting.current()
        if every is not None and reporter is not None:
            # --every by time: rank 0's clock says when; every rank takes part in a Trainer's save, so they agree on its
            # step (one past the furthest rank, as for a stop). And at the last step, as by steps.
            agreed = reporter.stop_request
            if state.is_world_process_zero and time.monotonic() - checkpointer.last_saved_at >= every:
                agreed.ask_to_save(state.global_step)
            if agreed.save_due(state.global_step) or state.global_step >= state.max_steps:
                control.should_save = True
        if control.should_save and state.is_world_process_zero:
            # A resume can save a step again whose earlier checkpoint was damaged: its old record must not vouch for the new files.
            (Path(self.checkpoints.local()) / f"checkpoint-{state.global_step}" / RECORD).unlink(missing_ok=True)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        reporter = reporting.current()
        if reporter is not None and reporter.phases.get(reporter.rank) == "saving":
            reporter.step(state.global_step, "train")
        if reporter is None or reporter.checkpointer is None or self.checkpoints is None:
            return
        if not state.is_world_process_zero or kwargs.get("model") is None:
            return
        path = Path(self.checkpoints.local()) / f"checkpoint-{state.global_step}"
        reporter.checkpointer.verify_trainer_checkpoint(path, kwargs["model"], state.global_step, reporter.history)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, "eval")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, "train")
        _mark_long_phase(state, control)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        numbers = {name: float(value) for name, value in (logs or {}).items() if isinstance(value, (int, float))}
        phase = "eval" if any(name.startswith("eval_") for name in numbers) else "train"
        _send(state, numbers, phase)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _note(state, "train", always=True)


def _mark_long_phase(state: Any, control: Any) -> None:
    """An evaluation or a save follows this step's end: the heartbeat says so, and a graceful stop waits for it."""
    reporter = reporting.current()
    if reporter is None or reporter.phases.get(reporter.rank) == "stopping":  # a stopping rank waits for the others, said so
        return
    if control.should_evaluate:
        reporter.step(state.global_step, "eval")
    elif control.should_save:
        reporter.step(state.global_step, "saving")


def _checkpointer() -> Checkpointer | None:
    reporter = reporting.current()
    return None if reporter is None else reporter.checkpointer


def _note(state: Any, phase: str, always: bool = False) -> None:
    """Record the step for the heartbeat; send progress when it is due, a training step's with the tokens and samples
    counted so far (`always`: the training's start or end, read now; else once the step has run)."""
    reporter = reporting.current()
    if reporter is None:
        return
    reporter.step(state.global_step, phase)
    if not (always or reporter.due()) or not state.is_world_process_zero:
        return
    counted = Counted(time.monotonic(), None, None) if phase == "train" else None
    progress = Progress(0, state.global_step, {}, state.max_steps, state.epoch, phase, counted)
    if always:
        reporter.send_now(progress, {})
    else:
        reporter.dispatch(progress, {})


def _send(state: Any, metrics: dict[str, float], phase: str) -> None:
    reporter = reporting.current()
    if reporter is None or not state.is_world_process_zero:
        return
    reporter.send_progress(Progress(0, state.global_step, metrics, state.max_steps, state.epoch, phase))
