"""`DIR/trial-N/trial.json`: the values that trained a trial's checkpoints, so that a resumed sweep continues only its own.

Written when the trial starts, in its own directory rather than in
`sweep.json`: it travels with the checkpoints it describes (a directory
copied elsewhere, `--resume OTHER`), one trial's write never touches
another's, and it is kept on gs:// as the checkpoints are (`sweep.json` is
local only). A resumed sweep reads it before any trial starts: a trial whose
directory was trained with other values (the grid or folds=K changed) does
not continue it: it starts from scratch, and its own directory, if that is
the one, is moved aside to `DIR/trial-N.earlier-K`, never deleted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.basics.atomic_write import write_atomically
from tpu_nb.basics.locations import is_remote, local_path
from tpu_nb.kernel.trials.spec import Trial
from tpu_nb.kernel.trials.sweep_record import plain_values

VALUES = "trial.json"
ASIDE = ".earlier-"


@dataclass(frozen=True, slots=True)
class TrainedWith:
    """What a trial's directory says trained its checkpoints: `values` (as JSON gives them back), or why it cannot tell."""

    values: Any = None
    unknown: str | None = None
    """Why the values are not known (no trial.json, or one that cannot be read); None when they are."""

    def same_as(self, trial: Trial) -> bool:
        return self.unknown is None and self.values == plain_values(trial.values)


def record_values(directory: str, trial: Trial) -> None:
    """Write the values trial `trial` runs with into its directory; `OSError` when the directory refuses it."""
    data = json.dumps({"trial": trial.number, "values": plain_values(trial.values)}, indent=1).encode()
    if is_remote(directory):
        import fsspec

        filesystem, root = fsspec.core.url_to_fs(directory)
        filesystem.makedirs(root, exist_ok=True)
        filesystem.pipe_file(f"{root.rstrip('/')}/{VALUES}", data)
        return
    path = Path(local_path(directory))
    path.mkdir(parents=True, exist_ok=True)
    write_atomically(path / VALUES, data)


def trained_with(directory: str) -> TrainedWith:
    """The values recorded in `directory` (a trial's, local or a URL)."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(directory)
    path = f"{root.rstrip('/')}/{VALUES}"
    try:
        if not filesystem.exists(path):
            return TrainedWith(unknown=f"it has no {VALUES}")
        data = json.loads(filesystem.cat_file(path))
    except (OSError, ValueError) as error:
        return TrainedWith(unknown=f"its {VALUES} could not be read ({error})")
    if not isinstance(data, dict) or "values" not in data:
        return TrainedWith(unknown=f"its {VALUES} holds no values")
    return TrainedWith(data["values"])


def move_aside(directory: str) -> str:
    """Move a trial's directory to the first free `DIR/trial-N.earlier-K`; that name. `OSError` when it cannot be moved."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(directory)
    number = 1
    while filesystem.exists(f"{root.rstrip('/')}{ASIDE}{number}"):
        number += 1
    filesystem.mv(root.rstrip("/"), f"{root.rstrip('/')}{ASIDE}{number}", recursive=True)
    return f"{directory.rstrip('/')}{ASIDE}{number}"


def move_back(aside: str, directory: str) -> None:
    """Undo `move_aside` (a sweep refused after it moved a directory)."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(aside)
    filesystem.mv(root, fsspec.core.url_to_fs(directory)[1], recursive=True)
