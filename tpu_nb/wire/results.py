"""What a run hands back to the kernel: each rank's result (its value and `--return` names), part by part.

Results are written with `torch.save` to the exchange directory in shared memory
(/dev/shm where it exists) and read back in the kernel, rather than pushed
through a pipe: `benchmarks/return_transfer.py` measures the difference.
Shared memory is often small (Docker gives containers 64 MB), so each part
goes where it fits: the exchange directory when it has room to spare, else a
private directory on local disk (`ResultPlaces`). Every file is checked once
written (its size and its zip directory, which a write cut short lacks)
before it counts, and a part that no place could hold is said, with the
sizes, never dropped. The value and each returned name are files of their
own, so one value that cannot be pickled or stored loses nothing else.

Module weights are a safetensors file, written a tensor at a time as each
is copied from the device (the worker never holds a second whole copy of
the model in host memory), each tied tensor once; the kernel maps it rather
than reading it (a file in shared memory is the only copy until the weights
are loaded into the notebook's module). A state dict safetensors cannot hold
(a dtype it lacks, a value that is not a tensor) goes as the other values
do, with `torch.save`, and loads with `weights_only=True`. The index of a
rank's parts is JSON; only other values are unpickled, and only from a
place the user trusts (`load_result(..., pickled=False)` otherwise).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, cast

from tpu_nb.basics.atomic_write import write_atomically
from tpu_nb.basics.units import format_bytes
from tpu_nb.wire.limits import cap_text

ROOM_TO_SPARE = 16 << 20
"""Bytes a place keeps free after a result is written there (other processes use shared memory too)."""


@dataclass(frozen=True, slots=True)
class ResultPlaces:
    """Where a run's workers may write results: the exchange directory first, then private directories on local disk."""

    exchange_dir: Path
    """Where the workers leave what the kernel reads (results, reports, stacks, the doctor's logs): a local run's private
    temporary directory (in shared memory when it has room), a pod host's `results/`; not the pod's run directory."""
    spill_dirs: tuple[Path, ...] = ()

    def all(self) -> tuple[Path, ...]:
        return (self.exchange_dir, *self.spill_dirs)


@dataclass(frozen=True, slots=True)
class Lost:
    """A part of a result that no place could hold: what, its size, and what each place said."""

    what: str  # "the value", "`model`"
    size: int  # bytes it needed, as estimated from its tensors
    tried: tuple[str, ...]  # e.g. "/dev/shm/tpu_nb-x1 (63.9 MiB free): No space left on device"

    def explain(self) -> str:
        places = "; ".join(self.tried) or "no place to write to"
        return (
            f"{self.what} ({format_bytes(self.size)}) could not be sent back: no place had room for it ({places}). "
            "Free space there, or send back less (return only the trained model; save other large values from "
            "the cell yourself, e.g. torch.save to a disk with room)."
        )


@dataclass(frozen=True, slots=True)
class RankResult:
    """What one rank's program hands back: its value, and the `--return` names it had."""

    value: Any = None
    has_value: bool = False
    """False when the cell ended in a statement, or a graceful stop cut it short."""
    returned: Mapping[str, Any] = field(default_factory=dict)
    """`--return` name -> value (`ModuleWeights` for a module the notebook holds)."""
    missing: tuple[str, ...] = ()
    """`--return` names the program never defined."""
    lost: tuple[Lost, ...] = ()
    """Parts that no place could hold (their names are not in `returned`; a lost value leaves `value` None)."""


@dataclass(frozen=True, slots=True)
class ModuleWeights:
    """A trained module's state dict, to load into the notebook's module in place: in the worker, its tensors where
    they are (tied ones one object under each name); in the kernel, on the CPU, mapped from the file they came in."""

    state_dict: dict[str, Any]
    adapters: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    """PEFT adapters the worker added to the module in place (name -> its config as a JSON-able dict), which the
    notebook's copy lacks until the kernel adds them: e.g. SFTTrainer(..., peft_config=...)."""


@dataclass(frozen=True, slots=True)
class NotTransferable:
    """Stands in for a value that could not be sent back from a worker."""

    type_name: str
    text: str
    reason: str

    def __repr__(self) -> str:
        return f"{self.text}\n(a {self.type_name} shown as text: it could not be sent back from the worker: {self.reason})"


class ResultNotLoaded(Exception):
    """A saved part the kernel could not load; its file is kept, and the message names it."""

    def __init__(self, path: Path, error: BaseException) -> None:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        # torch's weights-only refusal is a page of advice; its last words say what was refused.
        said = next((line for line in lines if line.startswith("WeightsUnpickler error:")), lines[0] if lines else "")
        super().__init__(
            f"its result file {path} could not be loaded ({type(error).__name__}: {cap_text(said, 300)}); the file was kept there"
        )
        self.path = path


_VALUE = "value"


def on_host(tensor: Any) -> Any:
    """A tensor on the host, contiguous (a worker passes its own way, faster for XLA tensors, to `save_result`)."""
    return tensor.detach().cpu().contiguous()


def save_result(result: RankResult, places: ResultPlaces, rank: int, to_host: Callable[[Any], Any] = on_host) -> None:
    """Write a rank's result, each part where it fits; a part that cannot be pickled becomes `NotTransferable`.

    Module weights are copied to the host with `to_host` a tensor at a time, as they are written.
    """
    parts = {
        **({_VALUE: result.value} if result.has_value else {}),
        **{f"return:{name}": value for name, value in result.returned.items()},
    }
    # Trained weights first: when space is short, they are what must come back.
    order = sorted(parts, key=lambda key: not isinstance(parts[key], ModuleWeights))
    index = [_save_part(key, parts[key], places, f"result-{rank}-{number}", to_host) for number, key in enumerate(order)]
    record = {"has_value": result.has_value, "missing": list(result.missing), "parts": index}
    write_atomically(index_file(places.exchange_dir, rank), json.dumps(record).encode())


def index_file(directory: Path, rank: int) -> Path:
    """The file that lists a rank's saved parts: it exists once the rank saved its result."""
    return directory / f"result-{rank}.json"


def load_result(directory: Path, rank: int, *, pickled: bool = True, names: Collection[str] | None = None) -> RankResult | None:
    """The result a rank saved in `directory`, or None when it saved none.

    Module weights load with `weights_only=True`; other values are unpickled
    only with `pickled` (a place the caller trusts), else they stand as
    `NotTransferable`. With `names`, only those `--return` names load (a
    sweep loads its best trial's weights alone); the value always does.
    `ResultNotLoaded` when a saved file cannot be read.
    """
    index = index_file(directory, rank)
    if not index.exists():
        return None
    try:
        record = json.loads(index.read_text())
    except (OSError, ValueError) as error:  # the disk failing under it: said as any part that cannot be read
        raise ResultNotLoaded(index, error) from None
    value, returned, lost = None, {}, []
    for part in record["parts"]:
        key = part["key"]
        if names is not None and key != _VALUE and key.removeprefix("return:") not in names:
            continue
        if part["kind"] == "lost":
            lost.append(Lost(_part_name(key), part["bytes"], tuple(part["tried"])))
            continue
        loaded = _load_part(directory, part, pickled)
        if key == _VALUE:
            value = loaded
        else:
            returned[key.removeprefix("return:")] = loaded
    has_value = record["has_value"] and not any(part["key"] == _VALUE and part["kind"] == "lost" for part in record["parts"])
    return RankResult(value, has_value, MappingProxyType(returned), tuple(record["missing"]), tuple(lost))


def to_cpu(value: Any) -> Any:
    """The same value with every XLA tensor and module moved to the CPU (imports torch only if needed)."""
    import torch

    if isinstance(value, torch.nn.Module):
        return value.cpu()
    if isinstance(value, torch.Tensor):
        return value.cpu() if value.device.type != "cpu" else value
    # Plain containers only: rebuilding a user's own container type could fail.
    if type(value) in (dict, OrderedDict):
        return type(value)((key, to_cpu(item)) for key, item in value.items())
    if type(value) in (list, tuple):
        return type(value)(to_cpu(item) for item in value)
    return value


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def _save_part(key: str, value: Any, places: ResultPlaces, stem: str, to_host: Callable[[Any], Any]) -> dict[str, Any]:
    """Save one part in the first place with room; its index entry (what kind, where, or what each place said)."""
    weights = isinstance(value, ModuleWeights)
    writing = _writing(value, stem, to_host)
    size, file_name = writing.size, writing.file_name
    free = {place: free_bytes(place) for place in places.all() if place.is_dir()}
    tried = {place: f"{place} ({format_bytes(room)} free)" for place, room in free.items()}
    for place in _by_room(free, size):
        path = place / file_name
        partial = path.with_name(f"{stem}.partial")
        recorder: _WriteRecorder | None = None
        try:
            with partial.open("wb") as file:
                recorder = _WriteRecorder(file)
                writing.write(cast(IO[bytes], recorder))
            writing.check(partial)
        except (OSError, RuntimeError, zipfile.BadZipFile, DamagedResultFile, pickle.PicklingError, TypeError, AttributeError) as error:
            partial.unlink(missing_ok=True)
            written_error = recorder.error if recorder is not None else None
            if written_error is None and not isinstance(error, OSError | zipfile.BadZipFile | DamagedResultFile):
                # Nothing failed to be written: the value itself cannot be pickled.
                return {"key": key, "kind": "unpicklable", **_not_transferable(value, error)}
            tried[place] += f": {written_error or error}"
            continue
        os.replace(partial, path)
        in_exchange_dir = place == places.exchange_dir
        entry: dict[str, Any] = {
            "key": key,
            "kind": "weights" if weights else "pickle",
            "file": file_name if in_exchange_dir else str(path),
            "bytes": size,
        }
        if weights and value.adapters:
            entry["adapters"] = {name: dict(config) for name, config in value.adapters.items()}  # JSON, like the index
        return entry
    return {"key": key, "kind": "lost", "bytes": size, "tried": list(tried.values())}


@dataclass(frozen=True, slots=True)
class _Writing:
    """How one part is written: its file's name, the bytes it needs, what writes it and what checks it once written."""

    file_name: str
    size: int
    write: Callable[[IO[bytes]], None]
    check: Callable[[Path], None]


def _writing(value: Any, stem: str, to_host: Callable[[Any], Any]) -> _Writing:
    """Module weights as safetensors, streamed from the device; anything else (and weights safetensors cannot hold) pickled."""
    import torch

    if isinstance(value, ModuleWeights):
        layout = weights_layout(value.state_dict)
        if layout is not None:
            return _Writing(
                f"{stem}{WEIGHTS_SUFFIX}",
                layout.size,
                lambda file: write_weights(file, layout, to_host),
                lambda path: check_weights_file(path, layout),
            )
        payload = {name: to_host(item) if isinstance(item, torch.Tensor) else to_cpu(item) for name, item in value.state_dict.items()}
    else:
        payload = to_cpu(value)
    # torch.save calls only write and flush on the file it is given.
    return _Writing(f"{stem}.pt", estimated_bytes(payload), lambda file: torch.save(payload, file), check_result_file)


def _by_room(free: dict[Path, int], size: int) -> list[Path]:
    """The places to try in order: those with room to spare (exchange directory first), then the roomiest of the rest."""
    roomy = [place for place in free if free[place] >= size * 1.1 + ROOM_TO_SPARE]
    rest = sorted((place for place in free if place not in roomy), key=free.__getitem__, reverse=True)
    return roomy + rest[:1]  # a size is an estimate: try one more place before giving up


class _WriteRecorder:
    """The file `torch.save` writes to, remembering the OS's error (torch's own message does not say 'no space')."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self._file.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError as error:
            self.error = error
            raise


def check_result_file(path: Path) -> None:
    """A written result file is whole: its zip directory is there and every entry lies inside the file."""
    size = path.stat().st_size
    with zipfile.ZipFile(path) as archive:
        entries = archive.infolist()
    if not any(entry.filename.endswith("data.pkl") for entry in entries):
        raise zipfile.BadZipFile(f"{path.name} has no data.pkl")
    if any(entry.header_offset + entry.compress_size > size for entry in entries):
        raise zipfile.BadZipFile(f"{path.name} is cut short ({size} bytes)")


WEIGHTS_SUFFIX = ".safetensors"
_NAMES = "tpu_nb.names"
"""The safetensors metadata entry naming, in the state dict's order, the tensor each key is (tied keys share one)."""
_SAFETENSORS_DTYPES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


class DamagedResultFile(ValueError):
    """A result file just written does not hold what was written (a write cut short that the writer did not notice)."""


@dataclass(frozen=True, slots=True)
class WeightsLayout:
    """A state dict as a safetensors file: its header, then each distinct tensor's bytes in `tensors`' order."""

    header: bytes  # the header's length (8 bytes, little-endian) and its JSON, padded to 8 bytes
    tensors: tuple[Any, ...]
    size: int  # the whole file's


def weights_layout(state: Mapping[str, Any]) -> WeightsLayout | None:
    """How `state` is laid out as a safetensors file (each tensor object once, however many keys name it), from its
    tensors' shapes and dtypes alone (nothing is read from a device); None if safetensors cannot hold it."""
    import torch

    stored: dict[int, str] = {}  # id of a tensor -> the name it is stored under (its first key)
    tensors: dict[str, Any] = {}
    for key, tensor in state.items():
        if (
            key == "__metadata__"
            or not isinstance(tensor, torch.Tensor)
            or tensor.layout != torch.strided
            or str(tensor.dtype).removeprefix("torch.") not in _SAFETENSORS_DTYPES
        ):
            return None
        if id(tensor) not in stored:
            stored[id(tensor)] = key
            tensors[key] = tensor
    # Wider elements first, as safetensors itself orders them: every tensor then starts at a multiple of its element size.
    order = sorted(tensors, key=lambda key: -tensors[key].element_size())
    header: dict[str, Any] = {
        "__metadata__": {"format": "pt", _NAMES: json.dumps({key: stored[id(tensor)] for key, tensor in state.items()})}
    }
    offset = 0
    for name in order:
        tensor = tensors[name]
        end = offset + tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[str(tensor.dtype).removeprefix("torch.")],
            "shape": list(tensor.shape),
            "data_offsets": [offset, end],
        }
        offset = end
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return WeightsLayout(struct.pack("<Q", len(text)) + text, tuple(tensors[name] for name in order), 8 + len(text) + offset)


def write_weights(file: IO[bytes], layout: WeightsLayout, to_host: Callable[[Any], Any]) -> None:
    """Write a safetensors file a tensor at a time: each copied to the host, written, let go before the next."""
    import torch

    file.write(layout.header)
    for tensor in layout.tensors:
        file.write(memoryview(to_host(tensor).reshape(-1).view(torch.uint8).numpy()))


def check_weights_file(path: Path, layout: WeightsLayout) -> None:
    """A weights file just written is whole: its size and its header are what `layout` says."""
    size = path.stat().st_size
    with path.open("rb") as file:
        header = file.read(len(layout.header))
    if size != layout.size or header != layout.header:
        raise DamagedResultFile(f"{path.name} holds {size:,} bytes, not the {layout.size:,} written")


def load_weights(path: Path) -> dict[str, Any]:
    """A state dict from a weights file, mapped (not read into memory): the tensors are the file's pages until
    copied into a module. Tied keys share one tensor again."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt", device="cpu") as file:
        names: dict[str, str] = json.loads((file.metadata() or {})[_NAMES])
        stored = {name: file.get_tensor(name) for name in dict.fromkeys(names.values())}
    return {key: stored[name] for key, name in names.items()}


def estimated_bytes(value: Any) -> int:
    """Bytes `torch.save` will need for `value`: its tensors' storages (each once) and a little for the rest."""
    import torch

    storages: dict[tuple[int, int], int] = {}
    seen: set[int] = set()

    def visit(item: Any, depth: int) -> None:
        if id(item) in seen or depth > 6:
            return
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        elif isinstance(item, torch.nn.Module):
            for tensor in item.state_dict(keep_vars=True).values():
                visit(tensor, depth + 1)
        elif isinstance(item, dict):
            for entry in item.values():
                visit(entry, depth + 1)
        elif isinstance(item, list | tuple | set | frozenset):
            for entry in item:
                visit(entry, depth + 1)
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            visit(vars(item), depth + 1)

    visit(value, 0)
    return sum(storages.values()) + (64 << 10)


def _load_part(directory: Path, part: dict[str, Any], pickled: bool) -> Any:
    import torch

    kind = part["kind"]
    if kind == "unpicklable":
        return NotTransferable(part["type_name"], part["text"], part["reason"])
    path = _part_path(directory, part)
    if kind == "pickle" and not pickled:
        return NotTransferable(
            "pickled value", f"<{_part_name(part['key'])}, not loaded>", f"it is pickled, and {directory} is not a place you named as yours"
        )
    from safetensors import SafetensorError

    try:
        if path.suffix == WEIGHTS_SUFFIX:
            loaded = load_weights(path)
        else:
            loaded = torch.load(path, map_location="cpu", weights_only=kind == "weights")
    except (OSError, RuntimeError, ValueError, KeyError, EOFError, pickle.UnpicklingError, MemoryError, SafetensorError) as error:
        raise ResultNotLoaded(path, error) from None
    return ModuleWeights(loaded, MappingProxyType(part.get("adapters", {}))) if kind == "weights" else loaded


def _part_path(directory: Path, part: dict[str, Any]) -> Path:
    # A part in the exchange directory is named relative to it (a pod's results travel), one spilled to disk by its path.
    file = Path(part["file"])
    return file if file.is_absolute() else directory / file.name


def _part_name(key: str) -> str:
    return "the value" if key == _VALUE else f"`{key.removeprefix('return:')}`"


def _not_transferable(value: Any, error: BaseException) -> dict[str, str]:
    return {"type_name": type(value).__qualname__, "text": _short_repr(value), "reason": str(error)}


def remove_places(places: ResultPlaces, keep: Path | None = None) -> None:
    """Remove the run's places, except the one holding `keep` (a result the kernel could not load)."""
    for place in places.all():
        if keep is None or not keep.is_relative_to(place):
            shutil.rmtree(place, ignore_errors=True)


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as error:  # noqa: BLE001 - any user __repr__ may fail; show why
        return f"<repr failed: {error}>"
    return cap_text(text, 2000)
