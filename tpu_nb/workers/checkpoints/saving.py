"""Checkpoints a run can trust, from inside its workers: saved in the background, reloaded and checked, then counted.

A hand-written loop names what to keep with `tpu_nb.checkpoint.track(model=,
optimizer=, scheduler=)`; its `report()` then saves at step boundaries (every
N steps or minutes, and when the run stops). Rank 0 saves, as `xm.save` does:
the step waits only for the copy from the device to host memory; a helper
thread writes `checkpoint-N.partial/`, frees the host copy, reads the file
back a record at a time, checks that it holds the weights that were saved
(checksums) and that they differ from the starting weights, writes
`tpu_nb.json`, and only then renames it `checkpoint-N`.
Older checkpoints are removed only after a newer one was verified. A Trainer
saves through its own checkpointing; tpu_nb checks each of its checkpoints
the same way (`verify_trainer_checkpoint`). Each file's tensors' checksums
are kept in the record; a resume reads them back first, and loads nothing
that would run code (`weights_only=True`): a checkpoint whose files changed
since, or that holds more, is passed over for the one before. A failed save
of any kind is said on the dashboard and training goes on. The checks are in
`checkpoint_checks`, reading files in `checkpoint_contents`, the directories
in `checkpoint_files`, and what keeps dropout masks the same through saves in
`xla_seed`. The worker's `WorkerReporter.checkpointer` is this process's
`Checkpointer`.
"""

from __future__ import annotations

import datetime
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.basics.locations import is_remote
from tpu_nb.basics.units import format_bytes
from tpu_nb.wire.channel import EventSink
from tpu_nb.wire.checkpoints import (
    LOOP_STATE,
    PREFIX,
    RECORD,
    CheckpointPlan,
    CheckpointRecord,
    checkpoint_name,
    list_checkpoints,
)
from tpu_nb.wire.events import CheckpointSaved, History, Notice
from tpu_nb.workers.checkpoints.checks import (
    check_loop_checkpoint,
    check_trainer_checkpoint,
    content_damage,
    model_checksums,
    numpy_arrays_allowed,
    parameter_difference,
    parameter_shapes,
    saved_checksums,
)
from tpu_nb.workers.checkpoints.contents import (
    FreedMemoryReturned,
    checksum,
    distinct,
    flat_tensors,
    load_safely,
    tensor_bytes,
    unique_tensors,
)
from tpu_nb.workers.checkpoints.files import Staged, local_copy, prune, remove_copy, upload_record_last
from tpu_nb.workers.checkpoints.xla_seed import seed_kept
from tpu_nb.workers.readings.read_back import host_copy


@dataclass(frozen=True, slots=True)
class _Taken:
    """What is known of a checkpoint once the step's state was copied to host memory."""

    step: int
    kind: str
    started: float  # time.monotonic() at the step's end
    stall_seconds: float
    history: list[tuple[int | None, dict[str, float]]]

    def record(
        self,
        path: Path,
        problem: str | None,
        parameters: dict[str, list[int]],
        world: dict[str, Any],
        start: dict[str, str] | None,
        checksums: dict[str, dict[str, str]],
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
            checksums=checksums,
        )


class CheckpointMismatch(ValueError):
    """The checkpoint to resume from was made by another model: the message names the difference."""


class CheckpointUnusable(ValueError):
    """No checkpoint to resume from can be trusted (files changed since they were saved, or holding what must not
    load): the message names each file and why."""


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
        self.passed_over: list[str] = []  # checkpoints a resume found damaged here, each with why (the kernel's come in the plan)
        self._saving: threading.Thread | None = None
        self._pending: dict[str, Any] | None = None  # the host copy the save thread writes; it lets go of it before reading back
        self._resumed_from: str | None = None  # the checkpoint `resume_copy` chose: the kernel's, or an older one

    # A hand-written loop.

    def track(self, objects: dict[str, Any], rank: int) -> int:
        """Keep `objects` in every checkpoint; restore them from the plan's checkpoint first. The step to start from."""
        self.objects = objects
        model = objects.get("model")
        if self.plan.resume_from is None:
            # Rank 0 alone saves: the other ranks of a process per device copy no weight to the host for them.
            self.start_checksums = model_checksums(model) if model is not None and rank == 0 else None
            return 0
        path, local = self.resume_copy()
        try:
            record = CheckpointRecord.from_json((local / RECORD).read_text())
            if model is not None:
                difference = parameter_difference(record.parameters, parameter_shapes(model))
                if difference:
                    raise CheckpointMismatch(f"cannot resume from {path}: {difference}")
            state = load_safely(local / LOOP_STATE, numpy_arrays_allowed)  # tensors and plain values (and NumPy arrays)
        finally:
            remove_copy(path, local)
        for name, value in objects.items():
            if name not in state["objects"]:
                raise CheckpointMismatch(f"cannot resume from {path}: it holds no `{name}` ({', '.join(state['objects'])})")
            value.load_state_dict(state["objects"][name])
        _set_rng_states(state["rng"])
        self.start_checksums = record.start_checksums or None
        self.last_saved_step = record.step
        if rank == 0:
            self._say_history(record, path)
        return record.step + 1

    def resume_copy(self) -> tuple[str, Path]:
        """The checkpoint to resume from, and its files here (`checkpoint_files.remove_copy` them when done).

        The kernel chose the newest verified one; its files are read back against the checksums its record keeps,
        and its torch files must load with weights_only=True. One that fails is passed over for the newest older one
        that passes (said on the dashboard); if none does, `CheckpointUnusable` names each one's files and why.
        """
        assert self.plan.resume_from is not None
        reasons: list[str] = []
        for path in self._resume_candidates(self.plan.resume_from):
            local = local_copy(path, self.world["world_size"])
            problem = _unusable(local)
            if problem is None:
                self.passed_over, self._resumed_from = reasons, path
                return path, local
            remove_copy(path, local)
            reasons.append(f"{path.rstrip('/').rsplit('/', 1)[-1]}: {problem}")
        directory = self.plan.resume_from.rstrip("/").rsplit("/", 1)[0]
        raise CheckpointUnusable(
            f"cannot resume from {directory}: no checkpoint there can be trusted ({'; '.join(reasons)}). Start without "
            "--resume, or resume from a directory only you can write to."
        )

    @staticmethod
    def _resume_candidates(chosen: str) -> Iterator[str]:
        """The kernel's choice, then (only if asked for) the older verified checkpoints beside it, newest first."""
        yield chosen
        directory, name = chosen.rstrip("/").rsplit("/", 1)
        step = int(name.removeprefix(PREFIX))
        for checkpoint in reversed(list_checkpoints(directory)):
            if checkpoint.verified and checkpoint.step < step:
                yield checkpoint.path

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
            self._pending = {"objects": _cpu_states(self.objects), "rng": _rng_states(current_seed), "step": step}
        taken = _Taken(step, "loop", started, time.monotonic() - started, thinned(history))
        self.last_saved_step, self.last_saved_at, self.last_step = step, time.monotonic(), step
        self._in_background(self._write_loop_checkpoint, taken)

    def save_last(self, history: list[tuple[int | None, dict[str, float]]]) -> None:
        """When a loop has ended: its final state, unless its last step was saved already."""
        if self.objects and self.last_step is not None and self.last_step != self.last_saved_step:
            self.save(self.last_step, history)

    def wait(self) -> None:
        """Until the checkpoint being written is done (before the next one, and before the worker exits)."""
        if self._saving is not None:
            self._saving.join()
            self._saving = None

    def _in_background(self, work: Callable[[_Taken], CheckpointRecord], taken: _Taken) -> None:
        """Run `work` on the save thread; whatever becomes of it is said on the dashboard (the next save tries again)."""

        def run() -> None:
            try:
                record = work(taken)
            except Exception as error:  # noqa: BLE001 - anything (a full disk, a pickling error, MemoryError, a refused upload) loses this checkpoint only; training goes on
                self._unwritten(taken, error)
                return
            self._after(record)

        self._saving = threading.Thread(target=run, name="tpu_nb-checkpoint", daemon=True)
        self._saving.start()

    def _write_loop_checkpoint(self, taken: _Taken) -> CheckpointRecord:
        import torch

        state, self._pending = self._pending, None
        assert state is not None
        expected = {name: checksum(tensor) for name, tensor in distinct(flat_tensors(state))}  # each stored once
        # From the copy: the model itself is the training thread's (reading it here, mid-step, fails on XLA).
        parameters = {key: list(tensor.shape) for key, tensor in state["objects"].get("model", {}).items()}
        with Staged(self.plan.directory, taken.step) as staging:
            torch.save(state, staging / LOOP_STATE)
            del state  # read back without it: a save holds the state in host memory once, not twice
            checked = check_loop_checkpoint(staging / LOOP_STATE, expected, self.start_checksums, taken.step)
            record = taken.record(staging, checked.problem, parameters, self.world, self.start_checksums, checked.checksums)
            (staging / RECORD).write_text(record.to_json())
        return record

    # A Trainer's checkpoints.

    def verify_trainer_checkpoint(self, path: Path, model: Any, step: int, history: list[tuple[int | None, dict[str, float]]]) -> None:
        """Check the checkpoint a Trainer just saved at `path` against `model`, then record it (in the background).

        A Trainer writes to a local directory: for a URL, the checked checkpoint is then copied there, its record last,
        and its local copy removed (uploaded or not).
        """
        self.wait()
        started = time.monotonic()
        trained = saved_checksums(model)  # the device-to-host copies, a tensor at a time: all the step waits for
        taken = _Taken(step, "trainer", started, time.monotonic() - started, thinned(history))
        self.last_saved_step, self.last_saved_at = step, time.monotonic()
        parameters = parameter_shapes(model)

        def check(taken: _Taken) -> CheckpointRecord:
            try:
                checked = check_trainer_checkpoint(path, trained, self.start_checksums)
                record = taken.record(path, checked.problem, parameters, self.world, self.start_checksums, checked.checksums)
                (path / RECORD).write_text(record.to_json())
                if is_remote(self.plan.directory):
                    upload_record_last(path, f"{self.plan.directory.rstrip('/')}/{path.name}")
            finally:
                if is_remote(self.plan.directory):
                    shutil.rmtree(path, ignore_errors=True)
            return record

        self._in_background(check, taken)

    def resume_trainer(self, path: str, model: Any, rank: int) -> None:
        """Before a Trainer resumes from `path`, the files `resume_copy` gave: the same model, or `CheckpointMismatch`;
        the curve so far to the dashboard."""
        where = self._resumed_from or path
        record = CheckpointRecord.from_json((Path(path) / RECORD).read_text())
        difference = parameter_difference(record.parameters, parameter_shapes(model))
        if difference:
            raise CheckpointMismatch(f"cannot resume from {where}: {difference}")
        self.start_checksums = record.start_checksums or None
        self.last_saved_step = record.step
        if rank == 0:
            self._say_history(record, where)

    def remember_start(self, model: Any) -> None:
        """The starting weights' checksums (a Trainer's, at its first step), to catch a checkpoint that saved them again."""
        if self.start_checksums is None:
            self.start_checksums = saved_checksums(model)

    # After each checkpoint.

    def _after(self, record: CheckpointRecord) -> None:
        where = f"{self.plan.directory.rstrip('/')}/{checkpoint_name(record.step)}"
        try:
            removed = prune(self.plan.directory, self.plan.keep, self.plan.budget) if record.verified else []
        except Exception as error:  # noqa: BLE001 - the new checkpoint stands; older ones stay until a later save removes them
            removed = []
            self.writer.send(
                Notice(0, f"older checkpoints in {self.plan.directory} could not be removed ({type(error).__name__}: {error})")
            )
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

    def _say_history(self, record: CheckpointRecord, path: str) -> None:
        """The saved loss curve, for the dashboard to continue it (sent in pieces that fit the wire)."""
        for start in range(0, len(record.history), 50):
            self.writer.send(History(0, tuple((step, dict(metrics)) for step, metrics in record.history[start : start + 50])))
        passed_over = "".join(f"; passed over {reason}" for reason in (*self.plan.passed_over, *self.passed_over))
        self.writer.send(Notice(0, f"resumed from {path} (step {record.step}){passed_over}"))


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
    """A copy in host memory of every tracked object's state (the model's under its own names), which training cannot
    touch; a tensor under several names (a tied embedding) is copied once and saved once."""
    from tpu_nb.workers.readings.read_back import unwrapped_key

    states = {}
    for name, value in objects.items():
        if name == "model":
            # The tensors themselves (not detached ones, each its own object): tied names are then one object.
            states[name] = {unwrapped_key(key): tensor for key, tensor in value.state_dict(keep_vars=True).items()}
        else:
            states[name] = value.state_dict()
    returned = FreedMemoryReturned(sum(tensor_bytes(tensor) for tensor in unique_tensors(states)))
    copied: dict[str, Any] = _host_copy(states, returned, {})
    return copied


def _host_copy(value: Any, returned: FreedMemoryReturned, copies: dict[int, Any]) -> Any:
    """`value` with every tensor copied to host memory: a copy even of a CPU tensor, which the next step would change;
    one copy of a tensor found more than once (`copies`: by the tensor's id)."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        if id(value) not in copies:
            # In storage of its own, contiguous: the bytes the file stores for it are its own, in order (what is checked).
            copies[id(value)] = host_copy(value)
            returned.copied(tensor_bytes(value))
        return copies[id(value)]
    if isinstance(value, dict):  # dict and OrderedDict (a state dict) rebuild from pairs
        return type(value)((key, _host_copy(item, returned, copies)) for key, item in value.items())
    if type(value) in (list, tuple):
        return type(value)(_host_copy(item, returned, copies) for item in value)
    return value


def _rng_states(xla: int | None) -> dict[str, Any]:
    import numpy
    import torch

    # Plain values only (NumPy's key as a list of ints, not an array), so a resume loads them with weights_only=True.
    generator = numpy.random.get_state(legacy=False)
    generator["state"]["key"] = generator["state"]["key"].tolist()
    states: dict[str, Any] = {"python": random.getstate(), "numpy": generator, "torch": torch.get_rng_state()}
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


def _unusable(local: Path) -> str | None:
    """Why the checkpoint whose files are in `local` cannot be resumed from (its record's checksums, what would load), or None."""
    try:
        record = CheckpointRecord.from_json((local / RECORD).read_text())
    except (OSError, ValueError, TypeError, KeyError) as error:
        return f"its record cannot be read ({type(error).__name__}: {error})"
    return content_damage(local, record.checksums, numpy_arrays_allowed)
