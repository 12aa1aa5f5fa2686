"""What the picker's buttons do, without widgets: insert a training cell, train now."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpu_nb.kernel.notebook.frontend import in_notebook_kernel
from tpu_nb.recipes.config import FSDP, TrainConfig
from tpu_nb.recipes.training import FineTuning, TrainingResult


@dataclass(frozen=True, slots=True)
class Insertion:
    """Whether the frontend was asked to insert the cell, and what to tell the user."""

    requested: bool
    note: str


def insert_cell(code: str, shell: Any) -> Insertion:
    """Ask the frontend to add `code` as the next cell, where it can; the caller also shows the code to copy."""
    if shell is None or not hasattr(shell, "set_next_input"):
        return Insertion(False, "Copy this cell into your notebook and run it:")
    shell.set_next_input(code, replace=False)
    if not in_notebook_kernel(shell):
        return Insertion(True, "The cell is at your next prompt (also below, to copy):")
    # Notebook frontends take the new cell from the reply to a cell's execution; a
    # button click is not one, so the cell arrives with the next cell that runs.
    return Insertion(
        True,
        "The cell will appear below the next cell you run (frontends add cells when a run ends; "
        "VS Code does not add them at all). Or copy it from here:",
    )


@dataclass(frozen=True, slots=True)
class Trained:
    """A finished "Train now": the fine-tuning (its `model` holds the trained weights) and its result."""

    fine_tuning: FineTuning
    result: TrainingResult


def train_now(config: TrainConfig) -> Trained:
    """What the inserted cell does, in place: prepare here, train on every TPU core, load the trained weights."""
    import tpu_nb
    from tpu_nb.recipes.preparation import prepare

    fine_tuning = prepare(config)
    result = tpu_nb.launch(fine_tuning.train, spmd=config.strategy == FSDP)
    fine_tuning.load_trained()
    return Trained(fine_tuning, result)
