"""Which process a file or directory was made for, named so that another process can tell, later, that it is gone.

A pid alone says little once its process has exited: the number goes to
another process, and on a /dev/shm or /tmp shared between containers it is
another pid namespace's number altogether. So an owner is named by its pid,
when that process started (clock ticks after boot) and where its pid counts
(12 hex digits of a digest of this boot's id and pid namespace):
`4242-1837211-a1b2c3d4e5f6`. An owner is gone only when it was named in this
boot and pid namespace and no process of that pid and start runs here; an
owner named elsewhere is never judged.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from tpu_nb.runtime.system import SystemView

OWNER_PATTERN = r"(\d+)-(\d+)-([0-9a-f]{12})"
"""An owner's name as it appears inside a longer name (its three parts are the pattern's groups)."""
_WHOLE = re.compile(rf"{OWNER_PATTERN}$")


@dataclass(frozen=True, slots=True)
class Owner:
    """The process a directory or file is for, as its name says."""

    pid: int
    started: int
    """Its start, in clock ticks after boot."""
    place: str
    """Where its pid counts: 12 hex digits of a digest of the boot's id and the pid namespace."""

    @property
    def name(self) -> str:
        return f"{self.pid}-{self.started}-{self.place}"

    @classmethod
    def parse(cls, name: str) -> Owner | None:
        """The owner a name written by `name` stands for (None for anything else)."""
        found = _WHOLE.match(name.strip())
        return None if found is None else cls(int(found[1]), int(found[2]), found[3])


def this_process(system: SystemView | None = None) -> Owner | None:
    """This process as an owner; None where /proc cannot say which process, boot and namespace it is."""
    system = system or SystemView.current()
    started = system.process_start_ticks(system.own_pid)
    namespace = system.own_pid_namespace()
    if started is None or namespace is None:
        return None
    return Owner(system.own_pid, started, hashlib.sha256(namespace.encode()).hexdigest()[:12])


def gone(owner: Owner, here: Owner, system: SystemView | None = None) -> bool:
    """`owner` was named where `here` is (the same boot and pid namespace) and its process no longer runs."""
    system = system or SystemView.current()
    return owner.place == here.place and system.process_start_ticks(owner.pid) != owner.started
