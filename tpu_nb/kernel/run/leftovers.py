"""The directories a kernel makes for its runs, named so that what a dead kernel left is found and removed, and nothing else.

A run's files live in private directories (/dev/shm for a run's results,
the temporary directory for results that do not fit and for a gs:// pod
run's local copy, the selftest's scratch). A kernel removes them when a run
ends; a kernel that dies cannot, and its workers die with it. So each name
says whose it is: the kernel's pid, when that process started (a pid goes to
another process once its own is gone) and where the pid counts, a digest of
this boot's id and pid namespace (`tpu_nb-results-4242-1837211-a1b2c3d4e5f6-x1y2z3`).
Every new directory first removes those whose process is provably gone: named
from this boot and pid namespace, and no process of that pid and start runs.
A directory named from elsewhere (another container sharing /dev/shm or /tmp:
its pids are not ours, dead here or alive) is left alone, as is any name
without that identity (tempfile's random letters are never read as a pid).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from tpu_nb.basics.owners import OWNER_PATTERN, Owner, gone, this_process
from tpu_nb.runtime.system import SystemView

PREFIX = "tpu_nb-"
_NAMED = re.compile(rf"{re.escape(PREFIX)}(?:[a-z]+-)?{OWNER_PATTERN}-")


def private_directory(kind: str, under: Path | None = None) -> Path:
    """A new empty directory only this user can open (0700, a random name): `tpu_nb-[kind-]PID-START-PLACE-...`.

    Where this process cannot be named (/proc says nothing of it), the name carries no owner: nothing removes it
    but its run.
    """
    parent = Path(tempfile.gettempdir()) if under is None else under
    owner = this_process()
    if owner is not None:
        remove_left_behind(parent, owner)
    middle = f"{kind}-" if kind else ""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{middle}{'' if owner is None else owner.name + '-'}", dir=parent))


def remove_left_behind(directory: Path, owner: Owner, system: SystemView | None = None) -> None:
    """Remove this user's tpu_nb directories in `directory` whose process is gone: named from `owner`'s boot and pid
    namespace, and no process of their pid and start runs here."""
    system = system or SystemView.current()
    for path in directory.glob(f"{PREFIX}*"):
        named = _NAMED.match(path.name)
        if named is None or named[3] != owner.place:
            continue  # not named by a process of this boot and namespace: not ours to judge
        try:
            mine = path.lstat().st_uid == os.getuid()
        except OSError:
            continue  # removed meanwhile
        if mine and gone(Owner(int(named[1]), int(named[2]), named[3]), owner, system):
            shutil.rmtree(path, ignore_errors=True)
