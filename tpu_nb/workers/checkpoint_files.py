"""Where a worker's checkpoints go: staged and renamed (or uploaded record last), copied back for a resume, pruned.

A directory is a local path or any fsspec URL (gs://...). A loop's checkpoint
is written as `checkpoint-N.partial/` and renamed once checked; to a URL, it is
written locally and uploaded with its record last. Until the record is there,
a checkpoint does not count.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tpu_nb.wire.checkpoints import PARTIAL, PREFIX, RECORD, Checkpoint, checkpoint_name, list_checkpoints


def prune(directory: str, keep: int, budget: int | None = None) -> list[Checkpoint]:
    """Remove all but the newest `keep` verified checkpoints (fewer if they take more than `budget` bytes, never the
    newest), and any unverified one older than the newest verified."""
    import fsspec

    checkpoints = list_checkpoints(directory)
    verified = [checkpoint for checkpoint in checkpoints if checkpoint.verified]
    if not verified:
        return []
    newest_kept = verified[-keep:]
    while budget is not None and len(newest_kept) > 1 and sum(_size(checkpoint) for checkpoint in newest_kept) > budget:
        newest_kept = newest_kept[1:]
    kept = {checkpoint.path for checkpoint in newest_kept}
    newest = verified[-1].step
    removed = [checkpoint for checkpoint in checkpoints if checkpoint.path not in kept and checkpoint.step < newest]
    filesystem, _root = fsspec.core.url_to_fs(directory)
    for checkpoint in removed:
        filesystem.rm(fsspec.core.url_to_fs(checkpoint.path)[1], recursive=True)
    if not is_remote(directory):
        # A write the session's end cut short leaves its staging directory: gone once a later checkpoint counts.
        for staging in Path(directory.removeprefix("file://")).glob(f"{PREFIX}*{PARTIAL}"):
            step = staging.name.removeprefix(PREFIX).removesuffix(PARTIAL)
            if step.isdigit() and int(step) < newest:
                shutil.rmtree(staging, ignore_errors=True)
    return removed


def _size(checkpoint: Checkpoint) -> int:
    return 0 if checkpoint.record is None else checkpoint.record.size


def trainer_directory(directory: str) -> str:
    """Where a Trainer writes its checkpoints: the checkpoint directory, or, for a URL, a local one they are copied from."""
    if is_remote(directory):
        return tempfile.mkdtemp(prefix="tpu_nb-trainer-checkpoints-")
    return directory.removeprefix("file://")


def local_copy(path: str) -> Path:
    """A checkpoint's directory on this machine: itself, or a copy of a URL's (into a temporary directory)."""
    if not is_remote(path):
        return Path(path.removeprefix("file://"))
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(path)
    local: Path = Path(tempfile.mkdtemp(prefix="tpu_nb-checkpoint-")) / str(root).rstrip("/").rsplit("/", 1)[-1]
    local.mkdir()
    for remote in filesystem.ls(root, detail=False):
        filesystem.get_file(remote, str(local / remote.rstrip("/").rsplit("/", 1)[-1]))
    return local


def is_remote(directory: str) -> bool:
    return "://" in directory and not directory.startswith("file://")


class Staged:
    """A checkpoint's directory while it is written: `DIR/checkpoint-N.partial`, renamed when done (or uploaded, for a URL)."""

    def __init__(self, directory: str, step: int) -> None:
        self.directory, self.step = directory, step
        self.remote = is_remote(directory)
        self.final = f"{directory.rstrip('/')}/{checkpoint_name(step)}"

    def __enter__(self) -> Path:
        if self.remote:
            self._temporary = Path(tempfile.mkdtemp(prefix="tpu_nb-checkpoint-"))
            self.path = self._temporary / checkpoint_name(step=self.step)
        else:
            base = Path(self.directory.removeprefix("file://"))
            base.mkdir(parents=True, exist_ok=True)
            self.path = base / (checkpoint_name(self.step) + PARTIAL)
            shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True)
        return self.path

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        if error is not None:
            shutil.rmtree(self._temporary if self.remote else self.path, ignore_errors=True)
            return
        if self.remote:
            upload_record_last(self.path, self.final)
            shutil.rmtree(self._temporary, ignore_errors=True)
        else:
            final = self.path.with_name(checkpoint_name(self.step))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(self.path, final)


def upload_record_last(local: Path, url: str) -> None:
    """Copy a checkpoint to `url`, its record last: until the record arrives, it does not count."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(url)
    filesystem.makedirs(root, exist_ok=True)
    files = sorted(local.iterdir(), key=lambda path: path.name == RECORD)
    for path in files:
        filesystem.put_file(str(path), f"{root}/{path.name}")
