"""Choosing the progress display: widgets in a notebook kernel, text elsewhere."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .state import RunProgress
from .text import TextProgress

if TYPE_CHECKING:
    from .dashboard import Dashboard


def widgets_supported() -> bool:
    """True inside an ipykernel (Jupyter, Colab, Kaggle); False in terminal IPython or plain Python."""
    zmqshell = sys.modules.get("ipykernel.zmqshell")
    if zmqshell is None:
        return False  # every kernel imports it before running a cell; importing it here would be slow
    from IPython import get_ipython

    # isinstance, not the class name: Colab's shell is a subclass.
    return isinstance(get_ipython(), zmqshell.ZMQInteractiveShell)


def make_display(title: str, runtime_label: str, expected_workers: int, widgets: bool) -> Dashboard | TextProgress:
    """A fresh RunProgress behind a dashboard (already displayed) or a text status line."""
    progress = RunProgress(title, runtime_label, expected_workers)
    if not widgets:
        return TextProgress(progress)
    from .dashboard import Dashboard  # imports ipywidgets: only in a kernel that shows widgets

    dashboard = Dashboard(progress)
    dashboard.display()
    return dashboard
