"""`report(...)`: progress from a worker's training loop to the kernel."""

from __future__ import annotations

from typing import Any


def report(step: int | None = None, loss: Any = None, **metrics: Any) -> None:
    """Send a training step's progress to the notebook (a no-op outside a worker).

    Placeholder until the live progress display lands: see issue #4.
    """
