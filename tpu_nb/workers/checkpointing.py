"""Checkpoints a run can trust, from inside its workers: saved in the background, reloaded and checked, then counted.

A hand-written loop names what to keep with `tpu_nb.checkpoint.track(model=,
optimizer=, scheduler=)`; its `report()` then saves at step boundaries (every
N steps or minutes, and when the run stops). Rank 0 saves, as `xm.save` does:
the step waits only for the copy from the device to host memory; a helper
thread writes `checkpoint-N.partial/`, reloads it, checks that it holds the
weights that were saved (checksums) and that they differ from the starting
weights, writes `tpu_nb.json`, and only then renames it `checkpoint-N`.
Older checkpoints are removed only after a newer one was verified. A Trainer
saves through its own checkpointing; tpu_nb checks each of its checkpoints
the same way (`verify_trainer_checkpoint`). The checks are in
`checkpoint_checks`, the directories in `checkpoint_files`, and what keeps
dropout masks the same through saves in `xla_seed`. The worker's
`WorkerReporter.checkpointer` is this process's `Checkpointer`.
"""

from __future__ import annotations

import datetime
import random
import shutil
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.wire.channel import EventSink
from tpu_nb.wire.checkpoints import (
    LOOP_STATE,
    RECORD,
    CheckpointPlan,
    CheckpointRecord,
    checkpoint_name,
)
from tpu_nb.wire.events import CheckpointSaved, History, Notice
from tpu_nb.wire.results import format_bytes

from .checkpoint_checks import check_loop_checkpoint, check_trainer_weights, model_checksums, parameter_difference, parameter_shapes
from .checkpoint_files import Staged, is_remote, local_copy, prune, upload_record_last
from .xla_seed import seed_kept


@dataclass(frozen=True, slots=True)
class _Taken:
    """What is known of a checkpoint once the step's state was copied to host memory."""

    step: int
    kind: str
    started: float  # time.monotonic() at the step's end
    stall_seconds: float
    history: list[tuple[int | None, dict[str, float]]]

    def record(
        self, path: Path, problem: str | None, parameters: dict[str, list[int]], world: dict[str, Any], start: dict[str, str] | None
    ) -> CheckpointRecord:
        losses = [metrics["loss"] for _step, metrics in self.history if "loss" in metrics]
        files = {file.name: file.stat().st_size for file in path.iterdir() if file.is_file() and file.name != RECORD}
        return CheckpointRecord(
            step=self.step,
            kind=self.kind,
            saved_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            seconds=time.monotonic() - self.started,
            stall_seconds=self.stall_seconds,
            size=sum(file.stat().st_size for file in path.rglob("*") if file.is_file()),
            verified=problem is None,
            problem=problem,
            loss=losses[-1] if losses else None,
            history=self.history,
            parameters=parameters,
            world=world,
            start_checksums=start or {},
            files=files,
        )


class CheckpointMismatch(ValueError):
    """The checkpoint to resume from was made by another model: the message names the difference."""


class Checkpointer:
    """This worker process's checkpoints: rank 0 saves, every rank restores."""

    def __init__(self, plan: CheckpointPlan, writer: EventSink, world: Mapping[str, Any]) -> None:
        self.plan = plan
        self.writer = writer
        self.world = dict(world)
        self.objects: dict[str, Any] = {}
        self.start_checksums: dict[str, str] | None = None  # the starting weights': a checkpoint that saved them again is caught
        self.last_saved_step: int | None = None
        self.last_saved_at = time.monotonic()
        self.last_step: int | None = None  # the newest step reported: where a finished loop's last checkpoint is
        self._saving: threading.Thread | None = None

    # A hand-written loop.

    def track(self, objects: dict[str, Any], rank: int) -> int:
        """Keep `objects` in every checkpoint; restore them from the plan's checkpoint first. The step to start from."""
        self.objects = objects
        model = objects.get("model")
        if self.plan.resume_from is None:
            self.start_checksums = model_checksums(model) if model is not None else None
            return 0
        import torch

        local = local_copy(self.plan.resume_from)
        state = torch.load(local / LOOP_STATE, map_location="cpu", weights_only=False)
        record = CheckpointRecord.from_json((local / RECORD).read_text())
        if is_remote(self.plan.resume_from):
            shutil.rmtree(local.parent, ignore_errors=True)
        if model is not None:
            difference = parameter_difference(record.parameters, parameter_shapes(model))
            if difference:
                raise CheckpointMismatch(f"cannot resume from {self.plan.resume_from}: {difference}")
        for name, value in objects.items():
            if name not in state["objects"]:
                raise CheckpointMismatch(
                    f"cannot resume from {self.plan.resume_from}: it holds no `{name}` ({', '.join(state['objects'])})"
                )
            value.load_state_dict(state["objects"][name])
        _set_rng_states(state["rng"])
        self.start_checksums = record.start_checksums or None
        self.last_saved_step = record.step
        if rank == 0:
            self._say_history(record)
        return record.step + 1

    def due(self, step: int) -> bool:
        """A periodic save falls on this step (rank 0 only saves; the stop's save is asked for separately)."""
        every = self.plan.every
        self.last_step = step
        if not self.objects or step == self.last_saved_step:
            return False
        if every.steps is not None:
            return step % every.steps == 0
        return time.monotonic() - self.last_saved_at >= (every.seconds or 0)

    def save(self, step: int, history: list[tuple[int | None, dict[str, float]]]) -> None:
        """Copy the tracked state to host memory now, then write and check it in the background (one save at a time)."""
        self.wait()
        started = time.monotonic()
        with seed_kept() as current_seed:
            state = {"objects": _cpu_states(self.objects), "rng": _rng_states(current_seed), "step": step}
        taken = _Taken(step, "loop", started, time.monotonic() - started, thinned(history))
        self.last_saved_step, self.last_saved_at, self.last_step = step, time.monotonic(), step
        self._saving = threading.Thread(target=self._write_loop_checkpoint, args=(state, taken), name="tpu_nb-checkpoint", daemon=True)
        self._saving.start()

    def save_last(self, history: list[tuple[int | None, dict[str, float]]]) -> None:
        """When a loop has ended: its final state, unless its last step was saved already."""
        if self.objects and self.last_step is not None and self.last_step != self.last_saved_step:
            self.save(self.last_step, history)

    def wait(self) -> None:
        """Until the checkpoint being written is done (before the next one, and before the worker exits)."""
        if self._saving is not None:
            self._saving.join()
            self._saving = None

    def _write_loop_checkpoint(self, state: dict[str, Any], taken: _Taken) -> None:
        import torch

        model = self.objects.get("model")
        try:
            with Staged(self.plan.directory, taken.step) as staging:
                torch.save(state, staging / LOOP_STATE)
                problem = check_loop_checkpoint(staging / LOOP_STATE, state, self.start_checksums)
                parameters = parameter_shapes(model) if model is not None else {}
                record = taken.record(staging, problem, parameters, self.world, self.start_checksums)
                (staging / RECORD).write_text(record.to_json())
        except (OSError, RuntimeError) as error:  # a full disk, a lost mount, a bucket refusing: this one is lost, the run goes on
            self._unwritten(taken, error)
            return
        self._after(record)

    # A Trainer's checkpoints.

    def verify_trainer_checkpoint(self, path: Path, model: Any, step: int, history: list[tuple[int | None, dict[str, float]]]) -> None:
        """Check the checkpoint a Trainer just saved at `path` against `model`, then record it (in the background).

        A Trainer writes to a local directory: for a URL, the checked checkpoint is then copied there, its record last.
        """
        self.wait()
        started = time.monotonic()
        trained = model_checksums(model)  # the device-to-host copies, a tensor at a time: all the step waits for
        taken = _Taken(step, "trainer", started, time.monotonic() - started, thinned(history))
        self.last_saved_step, self.last_saved_at = step, time.monotonic()
        parameters = parameter_shapes(model)

        def check() -> None:
            try:
                problem = check_trainer_weights(path, trained, self.start_checksums)
                record = taken.record(path, problem, parameters, self.world, self.start_checksums)
                (path / RECORD).write_text(record.to_json())
                if is_remote(self.plan.directory):
                    upload_record_last(path, f"{self.plan.directory.rstrip('/')}/{path.name}")
                    shutil.rmtree(path, ignore_errors=True)
            except (OSError, RuntimeError) as error:
                self._unwritten(taken, error)
                return
            self._after(record)

        self._saving = threading.Thread(target=check, name="tpu_nb-checkpoint", daemon=True)
        self._saving.start()

    def resume_trainer(self, path: str, model: Any, rank: int) -> None:
        """Before a Trainer resumes from `path`: the same model, or `CheckpointMismatch`; the curve so far to the dashboard."""
        record = CheckpointRecord.from_json((Path(path) / RECORD).read_text())
        difference = parameter_difference(record.parameters, parameter_shapes(model))
        if difference:
            raise CheckpointMismatch(f"cannot resume from {self.plan.resume_from}: {difference}")
        self.start_checksums = record.start_checksums or None
        self.last_saved_step = record.step
        if rank == 0:
            self._say_history(record)

    def remember_start(self, model: Any) -> None:
        """The starting weights' checksums (a Trainer's, at its first step), to catch a checkpoint that saved them again."""
        if self.start_checksums is None:
            self.start_checksums = model_checksums(model)

    # After each checkpoint.

    def _after(self, record: CheckpointRecord) -> None:
        where = f"{self.plan.directory.rstrip('/')}/{checkpoint_name(record.step)}"
        removed = prune(self.plan.directory, self.plan.keep, self.plan.budget) if record.verified else []
        self.writer.send(
            CheckpointSaved(
                0, record.step, where, record.seconds, record.stall_seconds, record.size, record.verified, record.problem, len(removed)
            )
        )
        if self.plan.budget is not None and record.verified and record.size > self.plan.budget:
            self.writer.send(
                Notice(
                    0,
                    f"checkpoint-{record.step} alone takes {format_bytes(record.size)}, over the budget of {format_bytes(self.plan.budget)}: kept all the same, as the newest",
                )
            )

    def _unwritten(self, taken: _Taken, error: BaseException) -> None:
        where = f"{self.plan.directory.rstrip('/')}/{checkpoint_name(taken.step)}"
        problem = f"it could not be written ({type(error).__name__}: {error})"
        self.writer.send(CheckpointSaved(0, taken.step, where, time.monotonic() - taken.started, taken.stall_seconds, 0, False, problem, 0))

    def _say_history(self, record: CheckpointRecord) -> None:
        """The saved loss curve, for the dashboard to continue it (sent in pieces that fit the wire)."""
        for start in range(0, len(record.history), 50):
            self.writer.send(History(0, tuple((step, dict(metrics)) for step, metrics in record.history[start : start + 50])))
        passed_over = "".join(f"; passed over {reason}" for reason in self.plan.passed_over)
        self.writer.send(Notice(0, f"resumed from {self.plan.resume_from} (step {record.step}){passed_over}"))


HISTORY_ROWS = 2000
"""Training rows a checkpoint keeps of the curve so far (evaluations all): a 9-hour run logs far more."""


def thinned(history: list[tuple[int | None, dict[str, float]]]) -> list[tuple[int | None, dict[str, float]]]:
    """The curve so far, every evaluation row and at most HISTORY_ROWS others, evenly spaced, the last one kept."""
    training = [index for index, (_step, metrics) in enumerate(history) if not any(name.startswith("eval_") for name in metrics)]
    if len(training) <= HISTORY_ROWS:
        return list(history)
    stride = len(training) / HISTORY_ROWS
    dropped = set(training) - {training[int(position * stride)] for position in range(HISTORY_ROWS)} - {training[-1]}
    return [row for index, row in enumerate(history) if index not in dropped]


def _cpu_states(objects: Mapping[str, Any]) -> dict[str, Any]:
    """A copy in host memory of every tracked object's state (the model's under its own names), which training cannot touch."""
    from .read_back import unwrapped_key

    states = {}
    for name, value in objects.items():
        state = value.state_dict()
        if name == "model":
            state = {unwrapped_key(key): tensor for key, tensor in state.items()}
        states[name] = _host_copy(state)
    return states


def _host_copy(value: Any) -> Any:
    """`value` with every tensor copied to host memory: a copy even of a CPU tensor, which the next step would change."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):  # dict and OrderedDict (a state dict) rebuild from pairs
        return type(value)((key, _host_copy(item)) for key, item in value.items())
    if type(value) in (list, tuple):
        return type(value)(_host_copy(item) for item in value)
    return value


def _rng_states(xla: int | None) -> dict[str, Any]:
    import numpy
    import torch

    states: dict[str, Any] = {"python": random.getstate(), "numpy": numpy.random.get_state(), "torch": torch.get_rng_state()}
    if xla is not None:
        states["xla"] = xla
    return states


def _set_rng_states(states: Mapping[str, Any]) -> None:
    import numpy
    import torch

    random.setstate(states["python"])
    numpy.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "xla" in states and "torch_xla" in sys.modules:  # saved from an XLA run: this one is too
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(states["xla"])
