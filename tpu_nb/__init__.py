"""tpu_nb: fine-tune Hugging Face transformers on TPUs from a notebook.

`%load_ext tpu_nb` registers the magics: `%tpu_info`, `%%tpu_train`,
`%%tpu_prepare`, `%tpu_checkpoints`, `%tpu_runs`, `%tpu_release`,
`%tpu_picker` and `%tpu_selftest`. From Python: `tpu_nb.launch`,
`tpu_nb.report`, `tpu_nb.pod.launch`, `tpu_nb.checkpoint`, `tpu_nb.spmd`,
`tpu_nb.picker`, `tpu_nb.study`, `tpu_nb.selftest.run`, `tpu_nb.recipes`.
Every public name: https://github.com/tpu-nb/tpu_nb/blob/main/docs/reference/python.md

Importing this package is cheap on purpose: every forked TPU worker imports
it too, so IPython, ipywidgets, torch, torch_xla and Optuna are only
imported where used (the options' declaration, read here for `launch`'s
signature, is plain Python).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpu_nb.errors import TpuNbWarning
from tpu_nb.kernel.planning.declared_options import declare

__version__ = "0.1.0"
__all__ = [
    "BackgroundRun",
    "CheckpointMismatch",
    "CheckpointUnusable",
    "LaunchRefused",
    "NotReturned",
    "RunEnded",
    "StopTraining",
    "TpuNbWarning",
    "TrainingInterrupted",
    "TrainingTimedOut",
    "WorkerDied",
    "WorkerError",
    "checkpoint",
    "in_worker",
    "launch",
    "load_ipython_extension",
    "picker",
    "pod",
    "report",
    "runtime_panel",
    "spmd",
    "study",
    "unload_ipython_extension",
]

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from tpu_nb.picking.widget import Picker
    from tpu_nb.runtime import RuntimePanel


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """`%load_ext tpu_nb`: register the magics (imported only now)."""
    from tpu_nb.magics import load

    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """`%unload_ext tpu_nb`: remove what `load_ipython_extension` added."""
    from tpu_nb.magics import unload

    unload(ipython)


def launch(fn: Any, *args: Any, **options: Any) -> Any:
    """Run `fn(*args)` in a worker per XLA device (forked: no pickling) and return rank 0's result.

    With `all_results=True`, a list of every rank's result. With `trials=`
    (a sweep or a search), `fn` is called as `fn(*args, trial=values)` in
    each trial's world (`values`: that trial's dict, e.g. {'fold': 2}), and
    a `SweepResult` comes back: every trial's outcome (`.trials`), its value
    (`.values`), the best by the compared metric (`.best`).
    With `background=True`, return at once a `BackgroundRun` handle (`status`,
    `wait()`, `stop()`, `kill()`, `metrics`, `result`, `stacks()`), with the
    same dashboard and Stop/Kill buttons as `%%tpu_train --background`.
    An interrupt stops gracefully: `report(...)` raises `StopTraining` in
    `fn` at the next step every rank reaches (waiting as long as the run's
    longest steps take, at least `stop_grace` seconds; else every worker is
    terminated); a second interrupt stops at once.
    Raises `LaunchRefused` (nothing started) with what to fix, `WorkerError`
    with the worker's traceback if `fn` raised, `WorkerDied`,
    `TrainingInterrupted`, `TrainingTimedOut`, or `NotReturned` when the
    value cannot come back from the worker.
    """
    from tpu_nb.kernel.launching import launch as _launch

    return _launch(fn, *args, **options)


declare("launch", launch)


def report(
    step: int | None = None,
    loss: Any = None,
    *,
    max_steps: int | None = None,
    epoch: float | None = None,
    batch_size: int | None = None,
    tokens: Any = None,
    samples: Any = None,
    **metrics: Any,
) -> None:
    """Send a training step's progress from a worker to the notebook's live display (rate-limited: call it every step).

    `loss` and other `metrics` (`eval_accuracy=...`) are numbers or XLA
    tensors, read after the step has run. `max_steps` and `epoch` place
    the step on the progress bar; `batch_size` (this rank's batch) counts
    samples; `tokens` and `samples` are this rank's counts in this step
    (numbers or tensors, summed on the device), for tokens/s, samples/s and
    MFU. After an interrupt or Stop it raises `StopTraining` at the step
    every rank agreed on. Outside a worker it does nothing.
    """
    from tpu_nb.workers.cell_api.reporting import report as _report

    _report(step=step, loss=loss, max_steps=max_steps, epoch=epoch, batch_size=batch_size, tokens=tokens, samples=samples, **metrics)


def in_worker() -> bool:
    """True inside a tpu_nb worker (a `%%tpu_train` cell, a function given to `launch`), False in the notebook."""
    from tpu_nb.workers.cell_api.reporting import in_worker as _in_worker

    return _in_worker()


# Imported on first use, to keep `import tpu_nb` cheap: name -> module.
_LAZY = {
    "StopTraining": "tpu_nb.workers.cell_api.reporting",
    "BackgroundRun": "tpu_nb.kernel.run.background",
    "LaunchRefused": "tpu_nb.kernel.endings.notebook_errors",
    "NotReturned": "tpu_nb.kernel.endings.notebook_errors",
    "RunEnded": "tpu_nb.kernel.endings.notebook_errors",
    "WorkerError": "tpu_nb.kernel.endings.notebook_errors",
    "WorkerDied": "tpu_nb.kernel.endings.notebook_errors",
    "TrainingInterrupted": "tpu_nb.kernel.endings.notebook_errors",
    "TrainingTimedOut": "tpu_nb.kernel.endings.notebook_errors",
    "CheckpointMismatch": "tpu_nb.workers.checkpoints.saving",
    "CheckpointUnusable": "tpu_nb.workers.checkpoints.saving",
    "study": "tpu_nb.kernel.trials.studies",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in ("spmd", "pod", "checkpoint"):  # tpu_nb.spmd.shard_model(...), tpu_nb.pod.launch(...) without importing them first
        return importlib.import_module(f"tpu_nb.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tpu_nb' has no attribute {name!r}")


def picker(directory: str | None = None) -> Picker:
    """The fine-tuning picker: task, model, dataset, hyperparameters; preview, insert a cell or train now.

    Leave it as a cell's last line to show it; `directory` is also searched for local models.
    """
    from tpu_nb.picking import picker as make_picker

    return make_picker(directory=directory)


def runtime_panel() -> RuntimePanel:
    """A displayable summary of this runtime (what `%tpu_info` shows)."""
    from tpu_nb.runtime import RuntimePanel, detect

    return RuntimePanel(detect())
