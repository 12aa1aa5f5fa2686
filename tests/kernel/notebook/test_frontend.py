"""in_notebook_kernel: the one check for "is this a Jupyter kernel?"."""

from __future__ import annotations

import IPython
import pytest
from ipykernel.zmqshell import ZMQInteractiveShell
from IPython.terminal.interactiveshell import TerminalInteractiveShell

from tpu_nb.kernel.notebook.frontend import in_notebook_kernel


def test_only_an_ipykernel_shell_is_a_notebook_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert not in_notebook_kernel()
    monkeypatch.setattr(IPython, "get_ipython", lambda: object.__new__(TerminalInteractiveShell))
    assert not in_notebook_kernel()

    class ColabShell(ZMQInteractiveShell):
        pass

    monkeypatch.setattr(IPython, "get_ipython", lambda: object.__new__(ColabShell))
    assert in_notebook_kernel()


def test_a_given_shell_is_judged_instead_of_the_running_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert in_notebook_kernel(object.__new__(ZMQInteractiveShell))
    assert not in_notebook_kernel(object.__new__(TerminalInteractiveShell))
