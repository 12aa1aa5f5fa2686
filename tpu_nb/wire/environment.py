"""The workers' environment: decided in the kernel, applied by the supervisor after the fork.

The kernel's own `os.environ` is never changed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkerEnvironment:
    """Variables to set and to remove in the workers, and what to tell the user."""

    set: dict[str, str]
    remove: tuple[str, ...]
    notes: tuple[str, ...]
    devices: int

    def apply(self) -> None:
        """Change this process's environment (call only after fork)."""
        for name in self.remove:
            os.environ.pop(name, None)
        os.environ.update(self.set)
