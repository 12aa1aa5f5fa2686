"""Where a worker's checkpoints go: staged and renamed (or uploaded record last), copied back for a resume, pruned.

A directory is a local path or any fsspec URL (gs://...). A loop's checkpoint
is written as `checkpoint-N.partial/` and renamed once checked; to a URL, it is
written locally and uploaded with its record last. Until the record is there,
a checkpoint does not count. A resume reads a URL's checkpoint from a local
copy (`local_copy`), fetched once per host whatever the number of ranks.
Temporary directories are named `tpu_nb-checkpoint-KIND-PID-START-PLACE-...` (basics/owners.py), which
the kernel's cleanup of dead kernels' directories (`tpu_nb-[KIND-]PID-START-PLACE-...`,
kernel/run/leftovers.py) never reads as a kernel's: "checkpoint" and KIND
are words.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tpu_nb.basics.locations import is_remote, local_path
from tpu_nb.basics.owners import Owner, gone, this_process
from tpu_nb.wire.checkpoints import PARTIAL, PREFIX, RECORD, Checkpoint, checkpoint_name, list_checkpoints
from tpu_nb.workers.checkpoints.contents import TENSOR_FILES

TRAINER_STATE = "trainer_state.json"


def prune(directory: str, keep: int, budget: int | None = None) -> list[Checkpoint]:
    """Remove all but the newest `keep` verified checkpoints (fewer if they take more than `budget` bytes, never the
    newest), and any unverified one older than the newest verified; never the one a Trainer names its best."""
    import fsspec

    checkpoints = list_checkpoints(directory)
    verified = [checkpoint for checkpoint in checkpoints if checkpoint.verified]
    if not verified:
        return []
    kept = kept_checkpoints(checkpoints, keep, budget, trainer_best(verified[-1]))
    newest = verified[-1].step
    kept_paths = {checkpoint.path for checkpoint in kept}
    removed = [checkpoint for checkpoint in checkpoints if checkpoint.path not in kept_paths and checkpoint.step < newest]
    filesystem, _root = fsspec.core.url_to_fs(directory)
    for checkpoint in removed:
        filesystem.rm(fsspec.core.url_to_fs(checkpoint.path)[1], recursive=True)
    if not is_remote(directory):
        # A write the session's end cut short leaves its staging directory: gone once a later checkpoint counts.
        for staging in Path(local_path(directory)).glob(f"{PREFIX}*{PARTIAL}"):
            step = staging.name.removeprefix(PREFIX).removesuffix(PARTIAL)
            if step.isdecimal() and int(step) < newest:
                shutil.rmtree(staging, ignore_errors=True)
    return removed


def kept_checkpoints(checkpoints: list[Checkpoint], keep: int, budget: int | None, best: str | None) -> list[Checkpoint]:
    """Which of `checkpoints` (verified ones among them, by step) stay: the newest verified and the one named `best`
    whatever `keep` and `budget` say (as transformers' own rotation keeps the best), then the newest other verified
    ones up to `keep` in all, fewer if all those kept would take more than `budget` bytes (the best counted too)."""
    verified = [checkpoint for checkpoint in checkpoints if checkpoint.verified]
    protected = {verified[-1].path} | {
        checkpoint.path for checkpoint in checkpoints if checkpoint.path.rstrip("/").rsplit("/", 1)[-1] == best
    }
    others = [checkpoint.path for checkpoint in reversed(verified) if checkpoint.path not in protected][: max(keep - len(protected), 0)]
    sizes = {checkpoint.path: _size(checkpoint) for checkpoint in checkpoints}
    while budget is not None and others and sum(sizes[path] for path in protected | set(others)) > budget:
        others.pop()  # the oldest goes first
    kept = protected | set(others)
    return [checkpoint for checkpoint in checkpoints if checkpoint.path in kept]


def trainer_best(checkpoint: Checkpoint) -> str | None:
    """The name of the checkpoint a Trainer's `checkpoint` records as its best (`best_model_checkpoint` in its
    trainer_state.json), which `load_best_model_at_end` loads: a path in the directory the Trainer wrote to, which
    for a URL is a local one, so only its name counts. None for a loop's checkpoint, or no best."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(f"{checkpoint.path.rstrip('/')}/{TRAINER_STATE}")
    try:
        with filesystem.open(root, "r") as file:
            best = json.load(file).get("best_model_checkpoint")
    except (FileNotFoundError, ValueError):
        return None
    return str(best).rstrip("/").rsplit("/", 1)[-1] if best else None


STAGING_PREFIX = "tpu_nb-checkpoint-staging-"
"""A checkpoint written locally before its upload to a URL."""
TRAINER_PREFIX = "tpu_nb-checkpoint-trainer-"
"""A Trainer's own checkpoints, for a URL: each is uploaded once checked."""
COPY_PREFIX = "tpu_nb-checkpoint-copy-"
"""A rank's copy of a URL's checkpoint, to resume from."""
FETCH_PREFIX = "tpu_nb-checkpoint-fetch-"
"""A URL's checkpoint fetched once for the ranks of a run on this host, each taking its copy from it."""
TEMPORARY_PREFIXES = (STAGING_PREFIX, TRAINER_PREFIX, COPY_PREFIX)
"""Each named `PREFIX<owner>-<random>` after the process it is for (basics/owners.py: its pid, start and where the pid
counts): once that process is provably gone, the next one to make a temporary directory (or fetch a checkpoint) on the
host removes it, so a worker killed with SIGKILL leaves nothing for long, and a directory another container made in a
/tmp it shares is never taken for an abandoned one. The owner follows a word (`copy`, ...), where
kernel/run/leftovers.py never looks for one."""


def _size(checkpoint: Checkpoint) -> int:
    return 0 if checkpoint.record is None else checkpoint.record.size


def trainer_directory(directory: str) -> str:
    """Where a Trainer writes its checkpoints: the checkpoint directory, or, for a URL, a local one they are copied from."""
    if is_remote(directory):
        return str(temporary_directory(TRAINER_PREFIX))
    return local_path(directory)


def temporary_directory(prefix: str) -> Path:
    """A new private temporary directory for this process: `prefix` (one of TEMPORARY_PREFIXES), this process as its
    owner (none where /proc cannot say: then only its run removes it), random letters."""
    remove_abandoned(Path(tempfile.gettempdir()))
    owner = this_process()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{'' if owner is None else owner.name + '-'}"))


def remove_abandoned(directory: Path) -> None:
    """Remove the temporary directories of checkpoints in `directory` that no live process of this user's needs.

    A staging, a Trainer's directory or a rank's copy goes once the process named in it is gone; a shared fetch,
    once every rank that took a copy from it is gone (one being fetched holds its lock, and is left alone). A name
    whose owner this process cannot judge (made in another boot or pid namespace, or by an older tpu_nb) stays."""
    here = this_process()
    if here is None:
        return
    for path in directory.glob("tpu_nb-checkpoint-*"):
        try:
            found = path.lstat()
        except FileNotFoundError:
            continue  # removed meanwhile
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            continue
        if path.name.startswith(FETCH_PREFIX):
            with contextlib.suppress(BlockingIOError), _locked(path, wait=False) as lock:
                takers = _takers(path)
                if path.is_dir() and all(taker is not None and gone(taker, here) for taker in takers):
                    _remove(path, lock)
            continue
        for prefix in TEMPORARY_PREFIXES:
            if not path.name.startswith(prefix):
                continue
            owner = Owner.parse("-".join(path.name.removeprefix(prefix).split("-")[:3]))
            if owner is not None and gone(owner, here):
                shutil.rmtree(path, ignore_errors=True)


def local_copy(path: str, ranks: int) -> Path:
    """A checkpoint's directory on this machine: itself, or a URL's files copied into a new temporary directory (whoever
    asked removes that directory, the copy's parent, when done).

    A URL is fetched once per host for the ranks of a run here: the first to ask fetches it into a directory they
    share (under a lock file beside it); each takes hard links to its tensor files (stored once; never written to)
    and copies of the small ones (a Trainer's resume rewrites its trainer_state.json); the last rank to take its
    copy removes the shared directory. `ranks`: how many will ask (the run's ranks on this host).
    """
    if not is_remote(path):
        return Path(local_path(path))
    name = path.rstrip("/").rsplit("/", 1)[-1]
    copy = temporary_directory(COPY_PREFIX) / name
    try:
        key = hashlib.sha256(f"{os.getppid()} {path}".encode()).hexdigest()[:16]  # a run's ranks share their parent
        shared = Path(tempfile.gettempdir()) / f"{FETCH_PREFIX}{key}"
        with _locked(shared) as lock:
            _private_directory(shared)
            if not (shared / "fetched").exists():
                shutil.rmtree(shared / name, ignore_errors=True)  # a fetch cut short
                _fetch(path, shared / name)
                (shared / "fetched").touch()
            _take(shared / name, copy)
            takers = shared / "takers"
            takers.mkdir(exist_ok=True)
            me = this_process()
            (takers / f"{len(list(takers.iterdir()))}").write_text("" if me is None else me.name)
            if len(list(takers.iterdir())) >= ranks:
                _remove(shared, lock)
    except BaseException:
        shutil.rmtree(copy.parent, ignore_errors=True)
        raise
    return copy


def remove_copy(path: str, local: Path) -> None:
    """Remove what `local_copy(path)` made (nothing for a local checkpoint: it is used where it is)."""
    if is_remote(path):
        shutil.rmtree(local.parent, ignore_errors=True)


def _take(shared: Path, copy: Path) -> None:
    copy.mkdir()
    for file in shared.iterdir():
        if file.suffix in TENSOR_FILES:
            try:
                os.link(file, copy / file.name)
                continue
            except OSError:
                pass  # a file system without hard links: copied below
        shutil.copyfile(file, copy / file.name)


def _fetch(url: str, local: Path) -> None:
    """Copy a checkpoint's files from `url` into `local`, a file at a time."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(url)
    local.mkdir()
    for remote in filesystem.ls(root, detail=False):
        filesystem.get_file(remote, str(local / remote.rstrip("/").rsplit("/", 1)[-1]))


def _takers(shared: Path) -> list[Owner | None]:
    """The processes that took a copy from a shared fetch (None for one this process cannot name)."""
    takers = shared / "takers"
    return [Owner.parse(marker.read_text()) for marker in takers.iterdir()] if takers.is_dir() else []


@contextlib.contextmanager
def _locked(home: Path, wait: bool = True) -> Iterator[Path]:
    """Hold the lock file beside `home` (`BlockingIOError` at once if busy and not `wait`). Whoever removes `home` removes the
    lock file too, while holding it: a process that was waiting for it then finds the file gone and locks a new one."""
    lock = home.with_name(home.name + ".lock")
    while True:
        descriptor = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(descriptor), os.stat(lock)):
                    break
        except BaseException:
            os.close(descriptor)
            raise
        os.close(descriptor)
    try:
        yield lock
    finally:
        os.close(descriptor)


def _remove(home: Path, lock: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)
    lock.unlink(missing_ok=True)


def _private_directory(home: Path) -> None:
    """`home`, made only this user can open; refused if someone else made it first (its name is predictable)."""
    with contextlib.suppress(FileExistsError):
        home.mkdir(mode=0o700)
    found = home.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise OSError(errno.EEXIST, f"{home} is not a directory of this user's: remove it to resume")


class Staged:
    """A checkpoint's directory while it is written: `DIR/checkpoint-N.partial`, renamed when done (or uploaded, for a URL)."""

    def __init__(self, directory: str, step: int) -> None:
        self.directory, self.step = directory, step
        self.remote = is_remote(directory)
        self.final = f"{directory.rstrip('/')}/{checkpoint_name(step)}"

    def __enter__(self) -> Path:
        if self.remote:
            self._temporary = temporary_directory(STAGING_PREFIX)
            self.path = self._temporary / checkpoint_name(step=self.step)
        else:
            base = Path(local_path(self.directory))
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
            try:
                upload_record_last(self.path, self.final)
            finally:  # uploaded or not, the local copy goes (an upload that failed is reported by the caller)
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
