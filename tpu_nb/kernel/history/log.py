"""The run log: every run leaves a small record beside the notebook, so today's cells can be compared without rerunning them.

`tpu_nb_runs/runs.jsonl` in the notebook's directory (the kernel's working
directory; `--run-log DIR` or `TPU_NB_RUN_LOG` to put it elsewhere, `off`
for none): one JSON line per run, foreground or background, trial or not,
on this machine or a pod. A record is small (a curve keeps at most
`CURVE_POINTS` points per metric): the options that differ from their
defaults, the trial, the final and best value of each metric, the curves,
the time, the status, where the checkpoints are. Lines are appended under a
lock, so two kernels sharing a directory never write one number twice.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_nb.wire.events import Event, Progress

LOG_FILE = "runs.jsonl"
DEFAULT_DIRECTORY = "tpu_nb_runs"
ENVIRONMENT_VARIABLE = "TPU_NB_RUN_LOG"
OFF = "off"
CURVE_POINTS = 200
SMALLER_IS_BETTER = ("loss", "error", "perplexity", "wer", "cer", "mse", "mae", "rmse")
"""Words in a metric's name that mean lower is better; any other metric is better higher (accuracy, f1, ...)."""


def smaller_is_better(name: str) -> bool:
    return any(word in name.lower() for word in SMALLER_IS_BETTER)


def log_directory(option: str | None) -> Path | None:
    """Where runs are logged: `--run-log`'s directory, else TPU_NB_RUN_LOG's, else ./tpu_nb_runs; None when `off`."""
    chosen = option or os.environ.get(ENVIRONMENT_VARIABLE) or DEFAULT_DIRECTORY
    return None if chosen.strip().lower() == OFF else Path(chosen).expanduser()


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run as the log keeps it."""

    number: int
    """Its number in this log, from 1: what `%tpu_runs` names it by."""
    title: str
    started: float
    """Unix time."""
    seconds: float
    status: str
    text: str | None
    options: Mapping[str, Any]
    trial: Mapping[str, Any] | None
    sweep: str | None
    """The sweep it was a trial of (its start time and title), shared by its trials."""
    final: Mapping[str, float]
    best: Mapping[str, float]
    curves: Mapping[str, tuple[tuple[int, float], ...]]
    checkpoints: str | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        curves = {name: tuple((int(step), float(value)) for step, value in points) for name, points in data.get("curves", {}).items()}
        return cls(
            int(data["number"]),
            str(data["title"]),
            float(data["started"]),
            float(data["seconds"]),
            str(data["status"]),
            data.get("text"),
            dict(data.get("options", {})),
            data.get("trial"),
            data.get("sweep"),
            dict(data.get("final", {})),
            dict(data.get("best", {})),
            curves,
            data.get("checkpoints"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "title": self.title,
            "started": self.started,
            "seconds": round(self.seconds, 3),
            "status": self.status,
            "text": self.text,
            "options": dict(self.options),
            "trial": None if self.trial is None else dict(self.trial),
            "sweep": self.sweep,
            "final": dict(self.final),
            "best": dict(self.best),
            "curves": {name: [list(point) for point in points] for name, points in self.curves.items()},
            "checkpoints": self.checkpoints,
        }


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
        thinned = {}
        for name, points in self.points.items():
            stride = max(1, math.ceil(len(points) / CURVE_POINTS))
            kept = points[::stride]
            if kept[-1] != points[-1]:
                kept.append(points[-1])
            thinned[name] = tuple(kept)
        return thinned


def append_record(directory: Path, record: RunRecord) -> RunRecord:
    """Append `record` with the next number in the log; the record as written."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOG_FILE, "a+", encoding="utf-8") as log:
        fcntl.flock(log, fcntl.LOCK_EX)  # released when the file closes
        log.seek(0)
        numbers = [_number(line) for line in log]
        numbered = RunRecord(**{**_fields(record), "number": max([0, *numbers]) + 1})
        log.seek(0, os.SEEK_END)
        log.write(json.dumps(numbered.to_json(), default=repr) + "\n")  # a trial value JSON cannot hold is kept as its repr
    return numbered


def read_log(directory: Path) -> list[RunRecord]:
    """Every record in the log, oldest first (a line that cannot be read is passed over)."""
    path = directory / LOG_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(RunRecord.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return records


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


def _number(line: str) -> int:
    try:
        return int(json.loads(line)["number"])
    except (ValueError, KeyError, TypeError):
        return 0


def _fields(record: RunRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def records_named(records: Sequence[RunRecord], numbers: Sequence[int]) -> list[RunRecord]:
    """The records with these numbers, in the order given; `KeyError` naming a number the log does not have."""
    by_number = {record.number: record for record in records}
    missing = [number for number in numbers if number not in by_number]
    if missing:
        raise KeyError(missing)
    return [by_number[number] for number in numbers]
