"""`sweep.json` in a sweep's `--checkpoint` directory: which trials finished, with their final metrics.

A resumed sweep (`--resume`) reads it and reruns only the trials that did
not finish; each of those resumes from its own newest verified checkpoint
(`DIR/trial-N`) where it has one. Written after every trial's end, whole or
not at all. Kept for a local directory (or a Drive mount); with a gs://
directory a resumed sweep resumes every trial from its checkpoints instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tpu_nb.kernel.trials.spec import Trial
from tpu_nb.wire.atomic_write import write_atomically
from tpu_nb.wire.locations import is_remote, local_path

RECORD = "sweep.json"
FINISHED = "done"


def trial_directory(checkpoint: str, trial: Trial) -> str:
    """Where trial `trial` keeps its checkpoints: a directory of its own under the sweep's."""
    return f"{checkpoint.rstrip('/')}/trial-{trial.number}"


def finished_trials(checkpoint: str, trials: Sequence[Trial]) -> dict[int, Mapping[str, float]]:
    """The trials an earlier run of this sweep finished (same number, same values), with their final metrics."""
    path = _path(checkpoint)
    if path is None or not path.is_file():
        return {}
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))["trials"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}  # unreadable: every trial runs again, from its checkpoints
    found: dict[int, Mapping[str, float]] = {}
    for trial in trials:
        entry = recorded.get(str(trial.number))
        if isinstance(entry, dict) and entry.get("status") == FINISHED and entry.get("values") == _plain(trial.values):
            found[trial.number] = dict(entry.get("final", {}))
    return found


def record_trial(checkpoint: str, trial: Trial, status: str, final: Mapping[str, float]) -> None:
    """Add (or replace) trial `trial`'s entry."""
    path = _path(checkpoint)
    if path is None:
        return
    try:
        recorded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"trials": {}}
    except (OSError, ValueError):
        recorded = {"trials": {}}
    recorded.setdefault("trials", {})[str(trial.number)] = {"values": _plain(trial.values), "status": status, "final": dict(final)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(recorded, indent=1, sort_keys=True).encode())


def _path(checkpoint: str) -> Path | None:
    return None if is_remote(checkpoint) else Path(local_path(checkpoint)) / RECORD


def _plain(values: Mapping[str, Any]) -> Any:
    """The values as JSON gives them back (tuples become lists), so a record compares equal to the trial it recorded."""
    return json.loads(json.dumps(dict(values), default=repr))
