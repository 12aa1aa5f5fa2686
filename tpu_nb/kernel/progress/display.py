"""Choosing the progress display: widgets in a notebook kernel, a text line elsewhere."""

from __future__ import annotations

from typing import Protocol

from tpu_nb.kernel.endings.status import RunStatus
from tpu_nb.kernel.notebook.frontend import in_notebook_kernel
from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.kernel.progress.text import TextProgress
from tpu_nb.kernel.progress.throughput import Basis
from tpu_nb.wire.events import Event


class ProgressDisplay(Protocol):
    """What a run feeds its display: every event, then how it ended."""

    def on_event(self, event: Event) -> None: ...

    def finish(self, status: RunStatus, detail: str | None = None) -> None: ...


def make_display(
    title: str, runtime_label: str, expected_workers: int, worker_noun: str = "rank", basis: Basis | None = None
) -> ProgressDisplay:
    """A fresh ProgressState behind a dashboard (shown now, in the current cell) or a text status line.

    `worker_noun`: what each worker row is ("rank", or "host" for a pod run); `basis`: what MFU is measured against.
    """
    progress = ProgressState(title, runtime_label, expected_workers, worker_noun=worker_noun, basis=basis)
    if not in_notebook_kernel():
        return TextProgress(progress)
    from tpu_nb.kernel.progress.dashboard import Dashboard  # imports ipywidgets: only in a kernel that shows widgets

    dashboard = Dashboard(progress)
    dashboard.display()
    return dashboard
