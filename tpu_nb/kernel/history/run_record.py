"""A run's record in the run log: made JSON-safe on the way out, checked field by field on the way in.

Whatever a run carries (a trial value with a tuple key, an infinite float,
an object JSON cannot hold), its record is written as strict JSON; whatever
a line of the log holds (cut short, edited by hand, another version's), it
is read as a record or passed over, never a crash: a field that is not what
a record holds is left out and counted, so `%tpu_runs` can say so.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

DEEPEST = 16
"""Nesting deeper than this (or a value that contains itself) is kept as its repr."""
LATEST_START = 253_402_300_799.0
"""9999-12-31 UTC: the latest start the table can show as a date; a later one is not a run's."""


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
    tokens_per_second: float | None = None
    """Its tokens/s over its steps after warm-up (all chips); None where it counted no tokens."""
    mfu: float | None = None
    """Its model FLOPs utilisation over the same steps; None where no chip peak (or no FLOPs per token) is known."""

    def to_json(self) -> dict[str, Any]:
        """The record as values JSON holds exactly (`json_safe`)."""
        fields = {
            "number": self.number,
            "title": self.title,
            "started": self.started,
            "seconds": round(self.seconds, 3),
            "status": self.status,
            "text": self.text,
            "options": self.options,
            "trial": self.trial,
            "sweep": self.sweep,
            "final": self.final,
            "best": self.best,
            "curves": self.curves,
            "checkpoints": self.checkpoints,
            "tokens_per_second": self.tokens_per_second,
            "mfu": self.mfu,
        }
        return {name: json_safe(value) for name, value in fields.items()}


@dataclass(frozen=True, slots=True)
class RecordRead:
    """What one line of the log gave: its record (None: not a run's record) and how many of its values were left out."""

    record: RunRecord | None
    passed_over: int


def json_safe(value: object, depth: int = 0) -> Any:
    """`value` as strict JSON holds it: keys as strings, tuples as lists, non-finite floats and anything else as repr."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum as its number
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else repr(float(value))
    if depth < DEEPEST:
        if isinstance(value, Mapping):
            return {key if isinstance(key, str) else repr(key): json_safe(item, depth + 1) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [json_safe(item, depth + 1) for item in value]
    return repr(value)


def read_record(data: object) -> RecordRead:
    """The record a parsed line holds: None when its number, title, start, time or status is missing or not one."""
    if not isinstance(data, dict):
        return RecordRead(None, 0)
    number, title, status = data.get("number"), data.get("title"), data.get("status")
    started, seconds = _number(data.get("started")), _number(data.get("seconds"))
    if (
        not is_count(number)
        or not isinstance(title, str)
        or not isinstance(status, str)
        or started is None
        or not 0 <= started <= LATEST_START
        or seconds is None
    ):
        return RecordRead(None, 0)
    fields = _Fields(data)
    record = RunRecord(
        number,
        title,
        started,
        seconds,
        status,
        fields.text("text"),
        fields.mapping("options") or {},
        fields.mapping("trial"),
        fields.text("sweep"),
        fields.metrics("final"),
        fields.metrics("best"),
        fields.curves(),
        fields.text("checkpoints"),
        fields.number("tokens_per_second"),
        fields.number("mfu"),
    )
    return RecordRead(record, fields.passed_over)


def is_count(value: object) -> TypeGuard[int]:
    """A whole number as JSON gives it (not a bool, not 1e999 or 3.0)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> float | None:
    """A finite number, else None (NaN, 1e999, a string, a bool, a whole number past any float)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) <= sys.float_info.max else None  # float() would raise OverflowError
    return value if isinstance(value, float) and math.isfinite(value) else None


class _Fields:
    """A line's optional fields, each as a record holds it or left out; `passed_over` counts what was left out."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data
        self.passed_over = 0

    def text(self, name: str) -> str | None:
        value = self._data.get(name)
        return value if self._kept(value is None or isinstance(value, str)) else None

    def mapping(self, name: str) -> dict[str, Any] | None:
        value = self._data.get(name)
        if isinstance(value, dict):
            return dict(value)
        self._kept(value is None)
        return None

    def metrics(self, name: str) -> dict[str, float]:
        kept = {}
        for metric, value in (self.mapping(name) or {}).items():
            number = _number(value)
            if number is None:
                self.passed_over += 1
            else:
                kept[metric] = number
        return kept

    def number(self, name: str) -> float | None:
        """A finite number, or None (missing or null: a run without it, or logged before records had it)."""
        value = self._data.get(name)
        number = _number(value)
        return number if self._kept(value is None or number is not None) else None

    def curves(self) -> dict[str, tuple[tuple[int, float], ...]]:
        curves = {}
        for name, points in (self.mapping("curves") or {}).items():
            if self._kept(isinstance(points, list)):
                read = [_point(point) for point in points]
                curves[name] = tuple(point for point in read if point is not None)
                self.passed_over += read.count(None)
        return curves

    def _kept(self, fits: bool) -> bool:
        self.passed_over += not fits
        return fits


def _point(value: object) -> tuple[int, float] | None:
    """A curve's point: [step, value]."""
    if not isinstance(value, list) or len(value) != 2 or not is_count(value[0]):
        return None
    number = _number(value[1])
    return None if number is None else (value[0], number)
