"""The words for where a run is: one vocabulary for the magic, `launch`, handles and the dashboard."""

from __future__ import annotations

from typing import Literal, get_args

RunStatus = Literal["done", "stopped", "pruned", "failed", "interrupted", "timeout"]
"""How a run ended: finished, stopped gracefully (by the user or its deadline: its text says which), stopped gracefully by a
search's pruner, a worker failed or died, interrupted (hard), timed out."""
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)

HandleStatus = Literal["running", "stopping", "done", "stopped", "pruned", "failed", "interrupted", "timeout"]
"""A background run's status: alive ("running", "stopping" after a graceful stop request), then how it ended."""
