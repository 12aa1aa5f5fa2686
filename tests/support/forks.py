"""Python 3.12+'s warning on fork in a multi-threaded process, on a Python without it (this machine's 3.11)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable


def fork_that_warns(real_fork: Callable[[], int]) -> Callable[[], int]:
    """`os.fork` as CPython 3.12+ does it in a multi-threaded process: fork, then warn in the parent.

    CPython (Modules/posixmodule.c, warn_about_fork_with_threads) issues the
    DeprecationWarning after the fork, in the parent only, attributed to the
    caller of os.fork().
    """

    def fork() -> int:
        pid = real_fork()
        if pid:
            warnings.warn(
                f"This process (pid={os.getpid()}) is multi-threaded, use of fork() may lead to deadlocks in the child.",
                DeprecationWarning,
                stacklevel=2,
            )
        return pid

    return fork
