"""What the supervisor (the process that spawns a run's workers) leaves for the kernel in the run directory.

How `xmp.spawn` ended (`SupervisorReport`: an error, each worker's exit
code), and the modules its import of torch_xla brought in, which the kernel
imports too while the user reads the output (`tpu_nb.kernel.run.warm_imports`).
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path

from tpu_nb.basics.atomic_write import write_atomically

_REPORT = "supervisor.pkl"
_IMPORTED_MODULES = "imported-modules.json"


@dataclass(frozen=True, slots=True)
class SupervisorReport:
    """How `xmp.spawn` ended."""

    error: str | None
    exit_codes: dict[int, int] = field(default_factory=dict)  # worker pid -> exit code


def save_report(report: SupervisorReport, directory: Path) -> None:
    write_atomically(directory / _REPORT, pickle.dumps(report))


def load_report(directory: Path) -> SupervisorReport | None:
    path = directory / _REPORT
    return pickle.loads(path.read_bytes()) if path.exists() else None


def save_imported_modules(names: list[str], directory: Path) -> None:
    """The modules the supervisor's import of torch_xla brought in (for `tpu_nb.kernel.run.warm_imports`)."""
    write_atomically(directory / _IMPORTED_MODULES, json.dumps(sorted(names)).encode())


def load_imported_modules(directory: Path) -> list[str]:
    path = directory / _IMPORTED_MODULES
    return [str(name) for name in json.loads(path.read_text())] if path.exists() else []
