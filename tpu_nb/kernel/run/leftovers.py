"""The directories a kernel makes for its runs, named so that what a dead kernel left is found and removed.

A run's files live in private directories (/dev/shm for a run's results,
the temporary directory for results that do not fit and for a gs:// pod
run's local copy). A kernel removes them when a run ends; a kernel that
dies cannot, and its workers die with it. So each name carries the kernel's
pid (`tpu_nb-results-4242-x1y2z3`), and every new directory first clears the
ones whose kernel is gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tpu_nb.runtime.system import process_alive

PREFIX = "tpu_nb-"


def private_directory(kind: str, under: Path | None = None) -> Path:
    """A new empty directory only this user can open (0700, a random name): `tpu_nb-[kind-]PID-...`."""
    parent = Path(tempfile.gettempdir()) if under is None else under
    remove_left_behind(parent)
    middle = f"{kind}-" if kind else ""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{middle}{os.getpid()}-", dir=parent))


def remove_left_behind(directory: Path) -> None:
    """Remove this user's tpu_nb directories in `directory` whose kernel (the pid in their name) is gone."""
    for path in directory.glob(f"{PREFIX}*"):
        pid = _pid_in(path.name)
        try:
            mine = path.lstat().st_uid == os.getuid()
        except OSError:
            continue  # removed meanwhile
        if pid is not None and mine and not process_alive(pid):
            shutil.rmtree(path, ignore_errors=True)


def _pid_in(name: str) -> int | None:
    parts = name.removeprefix(PREFIX).split("-")
    for part in parts[:2]:  # "4242-x1y2z3" or "results-4242-x1y2z3"
        if part.isdigit():
            return int(part)
    return None
