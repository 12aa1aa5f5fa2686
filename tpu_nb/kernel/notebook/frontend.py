"""Whether the notebook runs in a Jupyter kernel, the one check behind widgets and cell insertion."""

from __future__ import annotations

import sys
from typing import Any


def in_notebook_kernel(shell: Any = None) -> bool:
    """True for an ipykernel shell (Jupyter, Colab, Kaggle, VS Code); False for terminal IPython or plain Python.

    `shell` defaults to the running IPython shell.
    """
    zmqshell = sys.modules.get("ipykernel.zmqshell")
    if zmqshell is None:
        return False  # every kernel imports it before running a cell; importing it here would be slow
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    # isinstance, not the class name: Colab's shell is a subclass.
    return isinstance(shell, zmqshell.ZMQInteractiveShell)
