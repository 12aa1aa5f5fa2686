"""`sweep.json` in a sweep's `--checkpoint` directory: which trials finished, with their final metrics.

A resumed sweep (`--resume`) reads it and reruns only the trials that did
not finish; each of those resumes from its own newest verified checkpoint
(`DIR/trial-N`) where it has one. Written after every trial's end, whole or
not at all. Kept for a local directory (or a Drive mount); with a gs://
directory a resumed sweep resumes every trial from its checkpoints instead.

The record helps a resume and is never worth a sweep: a file that is not
the shape written here is named (`SweepRecord.problem`) and read as none,
and writing it raises only `OSError`, for the caller to say.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tpu_nb.basics.atomic_write import write_atomically
from tpu_nb.basics.locations import is_remote, local_path
from tpu_nb.kernel.trials.spec import Trial

RECORD = "sweep.json"
FINISHED = "done"


@dataclass(frozen=True, slots=True)
class TrialEntry:
    """One trial's line in the record: the values it ran with, how it ended, its final metrics."""

    values: Any
    """As JSON gives them back (`plain_values`)."""
    status: str
    final: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class SweepRecord:
    """What `sweep.json` holds, by trial number; `problem` says why a file there was read as none."""

    entries: Mapping[int, TrialEntry] = field(default_factory=lambda: MappingProxyType({}))
    problem: str | None = None

    def with_trial(self, trial: Trial, status: str, final: Mapping[str, float]) -> SweepRecord:
        """The record with trial `trial`'s entry added (or replaced)."""
        entry = TrialEntry(plain_values(trial.values), status, MappingProxyType(dict(final)))
        return SweepRecord(MappingProxyType({**self.entries, trial.number: entry}))


def trial_directory(checkpoint: str, trial: Trial) -> str:
    """Where trial `trial` keeps its checkpoints: a directory of its own under the sweep's (a rerun: the first run's)."""
    return f"{checkpoint.rstrip('/')}/trial-{trial.number if trial.continues is None else trial.continues}"


def record_path(checkpoint: str) -> Path | None:
    """Where the record of a sweep checkpointing into `checkpoint` is kept (None: a remote directory keeps none)."""
    return None if is_remote(checkpoint) else Path(local_path(checkpoint)) / RECORD


def read_record(checkpoint: str) -> SweepRecord:
    """The record in `checkpoint`: empty when there is none, or when it cannot be read (then `problem` says why)."""
    path = record_path(checkpoint)
    if path is None or not path.is_file():
        return SweepRecord()
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError) as error:
        return SweepRecord(problem=f"{path} could not be read ({error})")
    entries, shape = _entries(data)
    if entries is None:
        return SweepRecord(problem=f"{path} is not a sweep's record ({shape})")
    return SweepRecord(MappingProxyType(entries))


def finished_trials(record: SweepRecord, trials: Sequence[Trial]) -> dict[int, Mapping[str, float]]:
    """The trials an earlier run of this sweep finished (same number, same values), with their final metrics."""
    found: dict[int, Mapping[str, float]] = {}
    for trial in trials:
        entry = record.entries.get(trial.number)
        if entry is not None and entry.status == FINISHED and entry.values == plain_values(trial.values):
            found[trial.number] = entry.final
    return found


def write_record(checkpoint: str, record: SweepRecord) -> None:
    """Write the record whole (or leave the one there as it was); `OSError` when the directory refuses it."""
    path = record_path(checkpoint)
    if path is None:
        return
    trials = {
        str(number): {"values": entry.values, "status": entry.status, "final": dict(entry.final)}
        for number, entry in sorted(record.entries.items())
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"trials": trials}, indent=1, sort_keys=True).encode())


def plain_values(values: Mapping[str, Any]) -> Any:
    """The values as JSON gives them back (tuples become lists), so a record compares equal to the trial it recorded.

    Values JSON cannot hold (an object, a dict with tuple keys) are kept as their repr: the same trial gives the same text.
    """
    try:
        return json.loads(json.dumps(dict(values), default=repr))
    except (TypeError, ValueError):
        return repr(dict(values))


def _entries(data: Any) -> tuple[dict[int, TrialEntry] | None, str]:
    """The entries of a record read as JSON, or None and what is wrong with its shape."""
    if not isinstance(data, dict):
        return None, f"a {type(data).__name__}, not an object"
    trials = data.get("trials", {})
    if not isinstance(trials, dict):
        return None, f'"trials" is a {type(trials).__name__}, not an object'
    entries = {}
    for key, entry in trials.items():
        if not key.isdecimal():  # what int() reads (isdigit() takes '²', which it refuses)
            return None, f'"trials" has the key {key!r}, not a trial number'
        if not isinstance(entry, dict) or not isinstance(entry.get("status"), str):
            return None, f"trial {key}'s entry is not an object with a status"
        final = entry.get("final", {})
        if not isinstance(final, dict) or not all(_is_number(value) for value in final.values()):
            return None, f'trial {key}\'s "final" is not an object of numbers'
        entries[int(key)] = TrialEntry(entry.get("values"), entry["status"], MappingProxyType(final))
    return entries, ""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
