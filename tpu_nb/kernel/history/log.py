"""The run log: every run leaves a small record in the kernel's working directory (or TPU_NB_RUN_LOG's), so today's
cells can be compared without rerunning them.

`tpu_nb_runs/runs.jsonl` in the notebook's directory (the kernel's working
directory; `--run-log DIR` or `TPU_NB_RUN_LOG` to put it elsewhere, `off`
for none): one JSON line per run, foreground or background, trial or not,
on this machine or a pod. A record is small (a curve keeps at most
`CURVE_POINTS` points per metric): the options that differ from their
defaults, the trial, the final and best value of each metric, the curves,
the time, the status, where the checkpoints are. Lines are appended under a
lock, so two kernels sharing a directory never write one number twice. A
damaged log costs only its damaged lines: they are passed over and counted
(`run_record.py` reads each line defensively), and a line cut short is ended
before the next record is appended.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_nb.kernel.history.run_record import RunRecord, is_count, read_record
from tpu_nb.wire.events import Event, Progress

LOG_FILE = "runs.jsonl"
DEFAULT_DIRECTORY = "tpu_nb_runs"
ENVIRONMENT_VARIABLE = "TPU_NB_RUN_LOG"
OFF = "off"
CURVE_POINTS = 200
THROUGHPUT_CURVE = "tokens_per_second"
"""The curve of a run's tokens/s against its steps (`%tpu_runs --metric tokens_per_second` overlays it)."""
SMALLER_IS_BETTER = ("loss", "error", "perplexity", "wer", "cer", "mse", "mae", "rmse")
"""Words in a metric's name that mean lower is better; any other metric is better higher (accuracy, f1, ...)."""


def smaller_is_better(name: str) -> bool:
    return any(word in name.lower() for word in SMALLER_IS_BETTER)


def log_directory(option: str | None) -> Path | None:
    """Where runs are logged: `--run-log`'s directory, else TPU_NB_RUN_LOG's, else ./tpu_nb_runs; None when `off`."""
    chosen = option or os.environ.get(ENVIRONMENT_VARIABLE) or DEFAULT_DIRECTORY
    # os.path's expanduser leaves ~someone unknown as written (Path's raises RuntimeError, which would cost the run)
    return None if chosen.strip().lower() == OFF else Path(os.path.expanduser(chosen))


@dataclass(frozen=True, slots=True)
class RunLog:
    """The log as read: its records, oldest first, and what of it was passed over."""

    records: tuple[RunRecord, ...]
    lines_passed_over: int
    """Lines that are not a run's record: cut short, damaged bytes, edited by hand."""
    values_passed_over: int
    """Values left out of the records read (a metric that is not a number, curves that are not curves)."""


@dataclass
class CurveKeeper:
    """A run's reported metrics as they come (rank 0's `Progress` events): curves, final and best values."""

    points: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    final: dict[str, float] = field(default_factory=dict)
    best: dict[str, float] = field(default_factory=dict)

    def on_event(self, event: Event) -> None:
        if not isinstance(event, Progress):
            return
        for name, value in event.metrics.items():
            if not isinstance(value, int | float) or not math.isfinite(value):
                continue
            self.final[name] = float(value)
            kept = self.best.get(name)
            if kept is None or (value < kept if smaller_is_better(name) else value > kept):
                self.best[name] = float(value)
            if event.step is not None:
                self.points.setdefault(name, []).append((event.step, float(value)))

    def curves(self) -> dict[str, tuple[tuple[int, float], ...]]:
        """Each curve thinned to at most CURVE_POINTS points, evenly, its last point kept."""
        return {name: thinned(points) for name, points in self.points.items()}


def thinned(points: Sequence[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """A curve's points thinned to about CURVE_POINTS, evenly, its last point kept."""
    stride = max(1, math.ceil(len(points) / CURVE_POINTS))
    kept = list(points[::stride])
    if kept and kept[-1] != points[-1]:
        kept.append(points[-1])
    return tuple(kept)


def append_record(directory: Path, record: RunRecord) -> RunRecord:
    """Append `record` with the next number in the log; the record with its number.

    A last line cut short (a full disk, a killed kernel) is ended first, so this record is a line of its own.
    """
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOG_FILE, "a+b") as log:
        fcntl.flock(log, fcntl.LOCK_EX)  # released when the file closes
        log.seek(0)
        written = log.read()
        numbers = [_number(line) for line in written.split(b"\n")]
        numbered = dataclasses.replace(record, number=max([0, *numbers]) + 1)
        torn = b"\n" if written and not written.endswith(b"\n") else b""
        log.write(torn + json.dumps(numbered.to_json(), allow_nan=False).encode() + b"\n")
    return numbered


def read_log(directory: Path) -> RunLog:
    """Every record in the log, oldest first, and how many lines and values were passed over; `OSError` if unreadable."""
    path = directory / LOG_FILE
    if not path.is_file():
        return RunLog((), 0, 0)
    with open(path, "rb") as log:
        fcntl.flock(log, fcntl.LOCK_SH)  # a record being appended is read whole or not at all
        lines = [line for line in log.read().split(b"\n") if line.strip()]
    read = [read_record(_parsed(line)) for line in lines]
    records = tuple(entry.record for entry in read if entry.record is not None)
    return RunLog(records, len(lines) - len(records), sum(entry.passed_over for entry in read))


def changed_options(options: Any, defaults: Any) -> dict[str, Any]:
    """The options (a dataclass) that differ from `defaults`, as JSON-able values."""
    changed = {}
    for name in getattr(options, "__dataclass_fields__", {}):
        value = getattr(options, name)
        if value != getattr(defaults, name):
            changed[name] = value if isinstance(value, str | int | float | bool | type(None)) else str(value)
    return changed


def sweep_label(title: str) -> str:
    """A sweep's label in the log: its title and start time, the same for each of its trials."""
    return f"{title} at {time.strftime('%Y-%m-%d %H:%M:%S')}"


def _parsed(line: bytes) -> object:
    """The JSON a line holds (bad bytes read as U+FFFD), None when it holds none."""
    try:
        return json.loads(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):  # not JSON; nested past the parser's depth
        return None


def _number(line: bytes) -> int:
    data = _parsed(line)
    number = data.get("number") if isinstance(data, dict) else None
    return number if is_count(number) else 0


def records_named(records: Sequence[RunRecord], numbers: Sequence[int]) -> list[RunRecord]:
    """The records with these numbers, in the order given; `KeyError` naming a number the log does not have."""
    by_number = {record.number: record for record in records}
    missing = [number for number in numbers if number not in by_number]
    if missing:
        raise KeyError(missing)
    return [by_number[number] for number in numbers]
