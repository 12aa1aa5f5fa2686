"""What a run leaves in its run directory for the kernel: results, a worker's exception, the supervisor's report.

Results are written with `torch.save` to a run directory in shared memory
(/dev/shm where it exists) and read back in the kernel, rather than pushed
through a pipe: `benchmarks/return_transfer.py` measures the difference.
The value and each returned name are files of their own, so one value that
cannot be pickled does not lose the others.
"""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any


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


@dataclass(frozen=True, slots=True)
class ExceptionReport:
    """What the kernel needs to show a worker's exception."""

    rank: int | None  # None: a pod host's own process, running the prepared cells
    world_size: int
    type_name: str
    message: str
    traceback_lines: list[str]


@dataclass(frozen=True, slots=True)
class SupervisorReport:
    """How `xmp.spawn` ended."""

    error: str | None
    exit_codes: dict[int, int] = field(default_factory=dict)  # worker pid -> exit code


@dataclass(frozen=True, slots=True)
class _Index:
    """Which files hold a rank's result."""

    has_value: bool
    returned: tuple[str, ...]
    missing: tuple[str, ...]


def save_result(result: RankResult, directory: Path, rank: int) -> None:
    """Write a rank's result; a part that cannot be pickled becomes `NotTransferable`."""
    import torch

    parts = {
        **({"value": result.value} if result.has_value else {}),
        **{f"return-{name}": value for name, value in result.returned.items()},
    }
    for index, value in enumerate(parts.values()):
        path = directory / f"result-{rank}-{index}.pt"
        value = to_cpu(value)
        try:
            _save_atomically(torch, value, path)
        except (pickle.PicklingError, TypeError, AttributeError, RuntimeError) as error:
            _save_atomically(torch, NotTransferable(type(value).__qualname__, _short_repr(value), str(error)), path)
    index_file = _Index(result.has_value, tuple(result.returned), result.missing)
    _write_atomically(directory / f"result-{rank}.index", pickle.dumps(index_file))


def load_result(directory: Path, rank: int) -> RankResult | None:
    """The result a rank saved, or None when it saved none."""
    import torch

    index_file = directory / f"result-{rank}.index"
    if not index_file.exists():
        return None
    index: _Index = pickle.loads(index_file.read_bytes())
    parts = [
        torch.load(directory / f"result-{rank}-{number}.pt", map_location="cpu", weights_only=False)
        for number in range(int(index.has_value) + len(index.returned))
    ]
    value = parts.pop(0) if index.has_value else None
    return RankResult(value, index.has_value, MappingProxyType(dict(zip(index.returned, parts, strict=True))), index.missing)


def save_exception(report: ExceptionReport, directory: Path) -> None:
    _write_atomically(directory / f"error-{report.rank}.pkl", pickle.dumps(report))


def load_exceptions(directory: Path) -> dict[int, ExceptionReport]:
    """Every worker exception in the run dir, by rank."""
    return {int(path.stem.split("-")[1]): pickle.loads(path.read_bytes()) for path in directory.glob("error-*.pkl")}


def save_report(report: SupervisorReport, directory: Path) -> None:
    _write_atomically(directory / "supervisor.pkl", pickle.dumps(report))


def load_report(directory: Path) -> SupervisorReport | None:
    path = directory / "supervisor.pkl"
    return pickle.loads(path.read_bytes()) if path.exists() else None


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
