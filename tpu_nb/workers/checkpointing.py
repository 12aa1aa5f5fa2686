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
the same way (`verify_trainer_checkpoint`).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.runtime.system import xla_runtime_started
from tpu_nb.wire.channel import EventSink
from tpu_nb.wire.checkpoints import (
    LOOP_STATE,
    PARTIAL,
    RECORD,
    Checkpoint,
    CheckpointPlan,
    CheckpointRecord,
    checkpoint_name,
    list_checkpoints,
)
from tpu_nb.wire.events import CheckpointSaved, History, Notice
from tpu_nb.wire.results import format_bytes


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
        if _is_remote(self.plan.resume_from):
            shutil.rmtree(local.parent, ignore_errors=True)
        if model is not None:
            difference = parameter_difference(record.parameters, _parameters(model))
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
        with seed_kept() as xla_seed:
            state = {"objects": _cpu_states(self.objects), "rng": _rng_states(xla_seed), "step": step}
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
            with _staged(self.plan.directory, taken.step) as staging:
                torch.save(state, staging / LOOP_STATE)
                problem = _check_loop_checkpoint(staging / LOOP_STATE, state, self.start_checksums)
                parameters = _parameters(model) if model is not None else {}
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
        parameters = _parameters(model)

        def check() -> None:
            try:
                problem = check_trainer_weights(path, trained, self.start_checksums)
                record = taken.record(path, problem, parameters, self.world, self.start_checksums)
                (path / RECORD).write_text(record.to_json())
                if _is_remote(self.plan.directory):
                    _upload_record_last(path, f"{self.plan.directory.rstrip('/')}/{path.name}")
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
        difference = parameter_difference(record.parameters, _parameters(model))
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


def prune(directory: str, keep: int, budget: int | None = None) -> list[Checkpoint]:
    """Remove all but the newest `keep` verified checkpoints (fewer if they take more than `budget` bytes, never the
    newest), and any unverified one older than the newest verified."""
    import fsspec

    checkpoints = list_checkpoints(directory)
    verified = [checkpoint for checkpoint in checkpoints if checkpoint.verified]
    if not verified:
        return []
    newest_kept = verified[-keep:]
    while budget is not None and len(newest_kept) > 1 and sum(_size(checkpoint) for checkpoint in newest_kept) > budget:
        newest_kept = newest_kept[1:]
    kept = {checkpoint.path for checkpoint in newest_kept}
    newest = verified[-1].step
    removed = [checkpoint for checkpoint in checkpoints if checkpoint.path not in kept and checkpoint.step < newest]
    filesystem, _root = fsspec.core.url_to_fs(directory)
    for checkpoint in removed:
        filesystem.rm(fsspec.core.url_to_fs(checkpoint.path)[1], recursive=True)
    return removed


def _size(checkpoint: Checkpoint) -> int:
    return 0 if checkpoint.record is None else checkpoint.record.size


def parameter_difference(saved: Mapping[str, list[int]], current: Mapping[str, list[int]]) -> str | None:
    """How the model a checkpoint was saved from differs from this one (names, shapes), or None."""
    missing = sorted(set(saved) - set(current))
    extra = sorted(set(current) - set(saved))
    shapes = sorted(name for name in set(saved) & set(current) if list(saved[name]) != list(current[name]))
    said = []
    if missing:
        said.append(f"this model lacks {len(missing)} of its parameters ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    if extra:
        said.append(f"this model has {len(extra)} it does not ({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''})")
    if shapes:
        name = shapes[0]
        said.append(f"{len(shapes)} have other shapes ({name}: {list(saved[name])} saved, {list(current[name])} here)")
    return "; ".join(said) + ": it was saved from another model" if said else None


def check_trainer_weights(path: Path, trained: Mapping[str, str], start: Mapping[str, str] | None) -> str | None:
    """What is wrong with the weights a Trainer saved in `path`, against the trained model's checksums, or None."""
    saved = saved_checksums(path)
    if saved is None:
        return f"no weights file in {path.name} (model.safetensors, pytorch_model.bin or adapter_model.safetensors)"
    adapter = (path / "adapter_model.safetensors").exists()
    what = "adapter" if adapter else "weights"
    expected = {key: checksum for key, checksum in trained.items() if not adapter or "lora_" in key}
    own_keys = {key: _matching_key(key, expected) for key in saved}
    unknown = sorted(key for key, own in own_keys.items() if own is None)
    if unknown:
        return f"its {what} hold {len(unknown)} keys this model does not load ({', '.join(unknown[:3])}): they would not reload onto it"
    if start and saved and all(start.get(own or "") == saved[key] for key, own in own_keys.items()):
        return f"its {what} equal the starting ones: it would reload as the model before training (transformers #36004)"
    differing = [key for key, own in own_keys.items() if saved[key] != expected[own or key]]
    if differing:
        return f"{len(differing)} saved tensors differ from the trained model's ({', '.join(differing[:3])}): the save did not keep the trained weights"
    return None


def saved_checksums(path: Path) -> dict[str, str] | None:
    """Each saved tensor's checksum, read a tensor at a time (a model's weights need not fit in memory twice)."""
    import torch

    for name in ("adapter_model.safetensors", "model.safetensors"):
        if (path / name).exists():
            from safetensors import safe_open

            with safe_open(str(path / name), framework="pt") as weights:
                return {key: _checksum(weights.get_tensor(key)) for key in weights.keys()}
    if (path / "pytorch_model.bin").exists():
        return {
            key: _checksum(tensor) for key, tensor in torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True).items()
        }
    return None


def _matching_key(key: str, expected: Mapping[str, Any]) -> str | None:
    """The model's own key for a saved one (PEFT saves adapters without the adapter's name: `.lora_A.weight`)."""
    if key in expected:
        return key
    for own in expected:
        if own.replace(".default", "") == key or own.endswith("." + key) or key.endswith("." + own):
            return own
    return None


def _check_loop_checkpoint(path: Path, state: Mapping[str, Any], start: Mapping[str, str] | None) -> str | None:
    """What is wrong with a loop checkpoint just written, reloaded from disk, or None."""
    import torch

    try:
        reloaded = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError, ValueError) as error:
        return f"it does not reload ({type(error).__name__}: {error})"
    for name, value in state["objects"].items():
        if _fingerprint_of(reloaded["objects"].get(name)) != _fingerprint_of(value):
            return f"`{name}` reloads other than it was saved: the write was damaged"
    model = state["objects"].get("model")
    if model is not None and start and state["step"] > 0 and {key: _checksum(tensor) for key, tensor in model.items()} == dict(start):
        return "the model's weights equal the starting weights: it did not train, or another model was tracked"
    return None


def trainer_directory(directory: str) -> str:
    """Where a Trainer writes its checkpoints: the checkpoint directory, or, for a URL, a local one they are copied from."""
    if _is_remote(directory):
        return tempfile.mkdtemp(prefix="tpu_nb-trainer-checkpoints-")
    return directory.removeprefix("file://")


def local_copy(path: str) -> Path:
    """A checkpoint's directory on this machine: itself, or a copy of a URL's (into a temporary directory)."""
    if not _is_remote(path):
        return Path(path.removeprefix("file://"))
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(path)
    local: Path = Path(tempfile.mkdtemp(prefix="tpu_nb-checkpoint-")) / str(root).rstrip("/").rsplit("/", 1)[-1]
    local.mkdir()
    for remote in filesystem.ls(root, detail=False):
        filesystem.get_file(remote, str(local / remote.rstrip("/").rsplit("/", 1)[-1]))
    return local


def _is_remote(directory: str) -> bool:
    return "://" in directory and not directory.startswith("file://")


class _staged:
    """A checkpoint's directory while it is written: `DIR/checkpoint-N.partial`, renamed when done (or uploaded, for a URL)."""

    def __init__(self, directory: str, step: int) -> None:
        self.directory, self.step = directory, step
        self.remote = _is_remote(directory)
        self.final = f"{directory.rstrip('/')}/{checkpoint_name(step)}"

    def __enter__(self) -> Path:
        if self.remote:
            self._temporary = Path(tempfile.mkdtemp(prefix="tpu_nb-checkpoint-"))
            self.path = self._temporary / checkpoint_name(step=self.step)
        else:
            base = Path(self.directory.removeprefix("file://"))
            base.mkdir(parents=True, exist_ok=True)
            self.path = base / (checkpoint_name(self.step) + PARTIAL)
            shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True)
        return self.path

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        if error is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        if self.remote:
            _upload_record_last(self.path, self.final)
            shutil.rmtree(self._temporary, ignore_errors=True)
        else:
            final = self.path.with_name(checkpoint_name(self.step))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(self.path, final)


def _upload_record_last(local: Path, url: str) -> None:
    """Copy a checkpoint to `url`, its record last: until the record arrives, it does not count."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(url)
    filesystem.makedirs(root, exist_ok=True)
    files = sorted(local.iterdir(), key=lambda path: path.name == RECORD)
    for path in files:
        filesystem.put_file(str(path), f"{root}/{path.name}")


def model_checksums(model: Any) -> dict[str, str]:
    """Each weight's checksum, under the model's own names, copied to the host a tensor at a time (sharded ones gathered)."""
    from .programs import unwrapped_key

    with seed_kept():
        return {unwrapped_key(key): _checksum(tensor) for key, tensor in model.state_dict().items()}


def _cpu_states(objects: Mapping[str, Any]) -> dict[str, Any]:
    """A copy in host memory of every tracked object's state (the model's under its own names), which training cannot touch."""
    from .programs import unwrapped_key

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


def _parameters(model: Any) -> dict[str, list[int]]:
    from .programs import unwrapped_key

    return {unwrapped_key(name): list(tensor.shape) for name, tensor in model.state_dict().items()}


def _rng_states(xla_seed: int | None) -> dict[str, Any]:
    import numpy
    import torch

    states: dict[str, Any] = {"python": random.getstate(), "numpy": numpy.random.get_state(), "torch": torch.get_rng_state()}
    if xla_seed is not None:
        states["xla"] = xla_seed
    return states


MARK_STEP_ADD, MARK_STEP_MUL = 1012031, 7012063
"""What each sync does to XLA's root seed (torch_xla's MarkStep: seed = ADD + seed * MUL, modulo 2**64)."""


def seed_before_sync(seed: int) -> int:
    """The root seed a sync turned into `seed` (MUL is odd, so the step can be undone)."""
    return ((seed - MARK_STEP_ADD) * pow(MARK_STEP_MUL, -1, 2**64)) % 2**64


def seed_after_syncs(seed: int, syncs: int) -> int:
    for _ in range(syncs):
        seed = (MARK_STEP_ADD + seed * MARK_STEP_MUL) % 2**64
    return seed


def syncs_between(earlier: int, later: int, most: int = 64) -> int | None:
    """How many syncs turned XLA's seed `earlier` into `later` (None: not within `most`, or random work came between)."""
    for syncs in range(most + 1):
        if seed_after_syncs(earlier, syncs) == later:
            return syncs
    return None


def xla_seed() -> int | None:
    """XLA's current seed in this worker, or None where XLA never ran."""
    if not xla_runtime_started(sys.modules):
        return None
    import torch_xla.core.xla_model as xm

    return int(xm.get_rng_state())


@contextlib.contextmanager
def seed_kept() -> Iterator[int | None]:
    """Run the step's pending work, then leave XLA's random seed as if nothing else had synced.

    A save syncs (the copy to the host, xm.save, rendezvous), and each sync moves the seed: a
    run that saved, or stopped and resumed, would draw other dropout masks than one that did
    not. The first sync here is the one the step's own would have been (the seed it gives is
    read); on leaving, the seed is set to what that sync started from, so the step's next sync
    gives the same seed again. Yields that seed (what a checkpoint's RNG state holds), or None
    where XLA never ran. Exact for loops that sync every step, as XLA training does
    (MpDeviceLoader, torch_xla.sync()).
    """
    if not xla_runtime_started(sys.modules):
        yield None
        return
    import torch_xla.core.xla_model as xm

    from .programs import materialise_pending

    materialise_pending()
    seed = seed_before_sync(xm.get_rng_state())
    try:
        yield seed
    finally:
        xm.set_rng_state(seed)


def _set_rng_states(states: Mapping[str, Any]) -> None:
    import numpy
    import torch

    random.setstate(states["python"])
    numpy.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "xla" in states and "torch_xla" in sys.modules:  # saved from an XLA run: this one is too
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(states["xla"])


def _tensors(value: Any) -> Iterator[Any]:
    """Every tensor in a (nested) state, in a fixed order."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        yield value
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            yield from _tensors(value[key])
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def _fingerprint_of(value: Any) -> str:
    """One checksum for every tensor in a (nested) state."""
    digest = hashlib.sha256()
    for tensor in _tensors(value):
        digest.update(_checksum(tensor).encode())
    return digest.hexdigest()


def _checksum(tensor: Any) -> str:
    contiguous = tensor.detach().cpu().contiguous()
    return hashlib.sha256(contiguous.view(-1).view(dtype=_byte_type()).numpy().tobytes()).hexdigest() + str(tuple(contiguous.shape))


def _byte_type() -> Any:
    import torch

    return torch.uint8


_checkpointer: Checkpointer | None = None


def install(checkpointer: Checkpointer | None) -> None:
    global _checkpointer
    _checkpointer = checkpointer


def current() -> Checkpointer | None:
    return _checkpointer
