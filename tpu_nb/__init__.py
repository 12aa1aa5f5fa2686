"""tpu_nb: fine-tune Hugging Face transformers on TPUs from a notebook.

`%load_ext tpu_nb` registers `%tpu_info` and `%%tpu_train`. Importing this
package is cheap on purpose: every forked TPU worker imports it too, so
IPython, ipywidgets, torch and torch_xla are only imported where used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from tpu_nb.picking.widget import Picker
    from tpu_nb.runtime import RuntimePanel


class TpuNbWarning(UserWarning):
    """Warnings tpu_nb itself emits (the test suite turns them into errors)."""


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """`%load_ext tpu_nb`: register the magics (imported only now)."""
    from tpu_nb.kernel.magics import load

    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """`%unload_ext tpu_nb`: remove what `load_ipython_extension` added."""
    from tpu_nb.kernel.magics import unload

    unload(ipython)


def launch(fn: Any, *args: Any, **options: Any) -> Any:
    """Run `fn(*args)` on every XLA device; see `tpu_nb.kernel.launching.launch`."""
    from tpu_nb.kernel.launching import launch as _launch

    return _launch(fn, *args, **options)


def report(step: int | None = None, loss: Any = None, **metrics: Any) -> None:
    """Send training progress from a worker; see `tpu_nb.workers.reporting.report`."""
    from tpu_nb.workers.reporting import report as _report

    _report(step=step, loss=loss, **metrics)


def in_worker() -> bool:
    """True inside a tpu_nb worker (a `%%tpu_train` cell, a function given to `launch`), False in the notebook."""
    from tpu_nb.workers.reporting import in_worker as _in_worker

    return _in_worker()


# Imported on first use, to keep `import tpu_nb` cheap: name -> module.
_LAZY = {
    "StopTraining": "tpu_nb.workers.reporting",
    "BackgroundRun": "tpu_nb.kernel.run.background",
    "LaunchRefused": "tpu_nb.kernel.endings.notebook_errors",
    "WorkerError": "tpu_nb.kernel.endings.notebook_errors",
    "WorkerDied": "tpu_nb.kernel.endings.notebook_errors",
    "TrainingInterrupted": "tpu_nb.kernel.endings.notebook_errors",
    "TrainingTimedOut": "tpu_nb.kernel.endings.notebook_errors",
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
