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

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tpu_nb.runtime.system import SystemView

PREFIX = "tpu_nb-"
_NAMED = re.compile(rf"{re.escape(PREFIX)}(?:[a-z]+-)?(\d+)-(\d+)-([0-9a-f]{{12}})-")


@dataclass(frozen=True, slots=True)
class Owner:
    """The process a directory is for, as its name says."""

    pid: int
    started: int
    """Its start, in clock ticks after boot."""
    place: str
    """Where its pid counts: 12 hex digits of a digest of the boot's id and the pid namespace."""

    @property
    def name(self) -> str:
        return f"{self.pid}-{self.started}-{self.place}"


def this_process(system: SystemView | None = None) -> Owner | None:
    """This process as a directory names it; None where /proc cannot say which process, boot and namespace it is."""
    system = system or SystemView.current()
    started = system.process_start_ticks(system.own_pid)
    namespace = system.own_pid_namespace()
    if started is None or namespace is None:
        return None
    return Owner(system.own_pid, started, hashlib.sha256(namespace.encode()).hexdigest()[:12])


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
        if mine and system.process_start_ticks(int(named[1])) != int(named[2]):
            shutil.rmtree(path, ignore_errors=True)
