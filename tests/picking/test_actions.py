"""Inserting the training cell: where the frontend can, and always with the code to copy."""

from __future__ import annotations

import sys
import types

import pytest

from tpu_nb.picking.actions import insert_cell


class FakeKernelShell:
    """Stands in for ipykernel's ZMQInteractiveShell (Jupyter, Colab, Kaggle, VS Code)."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, object]] = []

    def set_next_input(self, text: str, replace: bool = False) -> None:
        self.payloads.append({"source": "set_next_input", "text": text, "replace": replace})


@pytest.fixture
def kernel_shell(monkeypatch: pytest.MonkeyPatch) -> FakeKernelShell:
    module = types.ModuleType("ipykernel.zmqshell")
    module.ZMQInteractiveShell = FakeKernelShell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", module)
    return FakeKernelShell()


def test_in_a_notebook_kernel_the_cell_comes_with_the_next_run(kernel_shell: FakeKernelShell) -> None:
    insertion = insert_cell("print(1)\n", kernel_shell)
    assert kernel_shell.payloads == [{"source": "set_next_input", "text": "print(1)\n", "replace": False}]
    assert insertion.requested
    assert insertion.note.startswith("The cell will appear below the next cell you run")
    assert "Or copy it from here:" in insertion.note


def test_colab_is_a_kernel_too(kernel_shell: FakeKernelShell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    insertion = insert_cell("x = 1\n", kernel_shell)
    assert insertion.requested and len(kernel_shell.payloads) == 1


def test_terminal_ipython_puts_it_at_the_next_prompt() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    insertion = insert_cell("x = 1\n", shell)
    assert shell.rl_next_input == "x = 1\n"
    assert insertion.note == "The cell is at your next prompt (also below, to copy):"
    shell.rl_next_input = None


def test_without_ipython_only_the_code_is_shown() -> None:
    insertion = insert_cell("x = 1\n", None)
    assert not insertion.requested and insertion.note == "Copy this cell into your notebook and run it:"
