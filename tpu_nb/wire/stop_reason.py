"""Why a run is stopped gracefully: one code the kernel asks with, the workers obey, and every message says.

The kernel writes the code into the shared-memory stop (`shared_memory_stop`)
or a pod host's stop file (`run_directory`); a worker that stops says which
one it obeyed (`events.Stopping`), and the run's ending says it in words.
"""

from __future__ import annotations

import enum


class StopReason(enum.IntEnum):
    """Who asked a run to stop at its next step boundary. The values are the code in shared memory and the stop file."""

    USER = 1
    """An interrupt, the Stop button, a handle's `.stop()`, or an interrupt of a sweep (all its running trials)."""
    DEADLINE = 2
    """`--deadline`: early enough for the stop and its last checkpoint."""
    PRUNED = 3
    """A search's pruner (Optuna's), for one trial."""

    @property
    def who(self) -> str:
        """The words for it after "stopped by": "the user", "its deadline", "its pruner"."""
        return _WHO[self]


_WHO = {StopReason.USER: "the user", StopReason.DEADLINE: "its deadline", StopReason.PRUNED: "its pruner"}
