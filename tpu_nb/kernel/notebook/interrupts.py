"""The notebook's interrupts while tpu_nb follows a run: counted, and taken between two polls.

Python raises KeyboardInterrupt wherever the kernel's main thread is. While
a run is followed that is tpu_nb's own work, drawing the dashboard among it:
an interrupt in the middle of its first `import matplotlib` left matplotlib
half imported for the rest of the session (seen under load: "module
'matplotlib' has no attribute 'get_data_path'" at the next chart). So for the
run's duration, and only then, SIGINT gets a handler that counts; the loop
asks after each poll. The previous handler is put back when the run ends, as
`asyncio.run` does with its own.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Interrupts:
    """How many interrupts arrived since the last `take()`."""

    def __init__(self) -> None:
        self._count = 0

    def arrived(self, _signum: int, _frame: FrameType | None) -> None:
        self._count += 1

    def take(self) -> int:
        count, self._count = self._count, 0
        return count


@contextmanager
def interrupts_counted() -> Iterator[Interrupts]:
    """Within: SIGINT is counted instead of raising KeyboardInterrupt, where this thread may say so.

    Only the main thread can set a signal handler; elsewhere (and where SIGINT
    is ignored or handled by someone else's handler) nothing changes and
    KeyboardInterrupt is raised as before.
    """
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield interrupts
        return
    signal.signal(signal.SIGINT, interrupts.arrived)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
