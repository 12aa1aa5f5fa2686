"""Moving results from a worker back to the kernel.

Results are written with `torch.save` to a run directory in shared memory
(/dev/shm where it exists) and read back in the kernel, rather than pushed
through a pipe: `benchmarks/return_transfer.py` measures the difference.
Each part is its own file, so one value that cannot be pickled does not
lose the others.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class ModuleWeights:
    """A trained module's state dict (on CPU), to load into the notebook's module in place."""

    state_dict: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NotTransferable:
    """Stands in for a value that could not be sent back from a worker."""

    type_name: str
    text: str
    reason: str

    def __repr__(self) -> str:
        return f"{self.text}\n(a {self.type_name} shown as text: it could not be sent back from the worker: {self.reason})"


def materialise_pending() -> None:
    """Run every pending XLA computation as one graph, if this process uses XLA.

    Reading lazy tensors one at a time compiles a graph per tensor: returning
    a tiny BERT that way cost 40 compilations and 80 s (measured).
    """
    torch_xla = sys.modules.get("torch_xla")
    if torch_xla is not None and torch_xla._XLAC._xla_runtime_is_initialized():
        torch_xla.sync()


def to_cpu(value: Any) -> Any:
    """The same value with every XLA tensor and module moved to the CPU."""
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


def module_weights(module: Any) -> ModuleWeights:
    materialise_pending()
    return ModuleWeights({key: tensor.cpu() for key, tensor in module.state_dict().items()})


def part_path(directory: Path, rank: int, index: int) -> Path:
    return directory / f"result-{rank}-{index}.pt"


def save_parts(parts: dict[str, Any], directory: Path, rank: int) -> None:
    """Write each named part to its own file; unpicklable parts become `NotTransferable`."""
    import torch

    materialise_pending()
    names = list(parts)
    for index, name in enumerate(names):
        path = part_path(directory, rank, index)
        value = to_cpu(parts[name])
        try:
            _save_atomically(torch, value, path)
        except (pickle.PicklingError, TypeError, AttributeError, RuntimeError) as error:
            _save_atomically(torch, NotTransferable(type(value).__qualname__, _short_repr(value), str(error)), path)
    _write_atomically(directory / f"result-{rank}.names", pickle.dumps(names))


def load_parts(directory: Path, rank: int) -> dict[str, Any] | None:
    """The parts a rank saved, or None when it saved none."""
    import torch

    names_file = directory / f"result-{rank}.names"
    if not names_file.exists():
        return None
    names = pickle.loads(names_file.read_bytes())
    return {
        name: torch.load(part_path(directory, rank, index), map_location="cpu", weights_only=False)
        for index, name in enumerate(names)
    }


def _save_atomically(torch: Any, value: Any, path: Path) -> None:
    partial = path.with_suffix(".partial")
    torch.save(value, partial)
    os.replace(partial, path)


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as error:  # noqa: BLE001 - any user __repr__ may fail; show why
        return f"<repr failed: {error}>"
    return text if len(text) <= 2000 else text[:2000] + "..."
