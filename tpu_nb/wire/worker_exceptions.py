"""A worker's exception, from the worker to the kernel: what it raised, capped to what an error message can show.

A local worker saves its `ExceptionReport` in the run directory (pickled:
the kernel's own private directory), which the kernel reads once the
workers are gone; a pod host sends its own as a JSON line
(`tpu_nb.wire.host_lines`).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

from tpu_nb.basics.atomic_write import write_atomically
from tpu_nb.wire.limits import cap_text

MAX_MESSAGE_BYTES = 16 << 10
MAX_TRACEBACK_LINES = 200
MAX_TRACEBACK_LINE_BYTES = 4 << 10


@dataclass(frozen=True, slots=True)
class ExceptionReport:
    """What the kernel needs to show a worker's exception."""

    rank: int | None  # None: a pod host's own process, running the prepared cells
    world_size: int
    type_name: str
    message: str
    traceback_lines: list[str]

    @classmethod
    def of(cls, rank: int | None, world_size: int, error: BaseException, traceback_lines: list[str]) -> ExceptionReport:
        """The report of `error`, its message and traceback capped to what an error message can show."""
        lines = [cap_text(line, MAX_TRACEBACK_LINE_BYTES) for line in traceback_lines]
        if len(lines) > MAX_TRACEBACK_LINES:
            half = MAX_TRACEBACK_LINES // 2
            lines = [*lines[:half], f"[… {len(lines) - 2 * half} lines skipped …]", *lines[-half:]]
        return cls(rank, world_size, type(error).__name__, cap_text(str(error), MAX_MESSAGE_BYTES), lines)


def save_exception(report: ExceptionReport, directory: Path) -> None:
    write_atomically(directory / f"error-{report.rank}.pkl", pickle.dumps(report))


def load_exceptions(directory: Path) -> dict[int, ExceptionReport]:
    """Every worker exception in the run dir, by rank (the kernel's own private run dir: pickles it wrote)."""
    return {int(path.stem.split("-")[1]): pickle.loads(path.read_bytes()) for path in directory.glob("error-*.pkl")}
