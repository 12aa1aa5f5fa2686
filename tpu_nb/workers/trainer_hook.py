"""Hugging Face `Trainer` inside a worker: live progress and XLA-safe defaults.

Only ever applied in forked workers (`watch_for_trainer`), never in the
kernel: the notebook's own transformers is left as it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

from . import reporting

_TRAINER_MODULE = "transformers.trainer"
# transformers 5 defaults to the fused AdamW on torch >= 2.8, which fails on
# XLA devices ("`fused=True` requires all the params to be floating point
# Tensors of supported devices"). The plain one works.
_XLA_UNSAFE_OPTIM = "adamw_torch_fused"
XLA_SAFE_OPTIM = "adamw_torch"


def watch_for_trainer() -> None:
    """Patch `transformers.Trainer` now if it is imported, else as soon as it is."""
    module = sys.modules.get(_TRAINER_MODULE)
    if module is not None:
        _patch(module)
    else:
        sys.meta_path.insert(0, _PatchOnImport())


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches `transformers.trainer` right after a cell imports it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TRAINER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _patch(module: Any) -> None:
    trainer_class = module.Trainer
    if getattr(trainer_class, "_tpu_nb_patched", False):
        return
    # transformers' tqdm bars (saving, evaluation) are widgets in a notebook,
    # which a forked worker cannot show: ipykernel drops and logs each message.
    from transformers.utils import logging

    logging.disable_progress_bar()
    original_init = trainer_class.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _make_xla_safe(kwargs.get("args") if "args" in kwargs else (args[1] if len(args) > 1 else None))
        original_init(self, *args, **kwargs)
        _replace_progress_callbacks(self, module)

    trainer_class.__init__ = __init__
    trainer_class._tpu_nb_patched = True


def _make_xla_safe(training_args: Any) -> None:
    """Swap a default fused AdamW for the plain one; an explicit choice is kept."""
    if training_args is None:
        return
    field = type(training_args).__dataclass_fields__["optim"]
    if _value(training_args.optim) == _XLA_UNSAFE_OPTIM and _value(field.default) == _XLA_UNSAFE_OPTIM:
        training_args.optim = XLA_SAFE_OPTIM
        reporter = reporting.current()
        if reporter is not None:
            reporter.notice(
                f"Trainer: optim {_XLA_UNSAFE_OPTIM} (the default) -> {XLA_SAFE_OPTIM}: "
                "fused AdamW fails on XLA devices. Set optim= yourself to choose another."
            )


def _value(option: Any) -> str:
    """An option's string value, whether given as a str or an enum member."""
    return str(getattr(option, "value", option))


def _replace_progress_callbacks(trainer: Any, module: Any) -> None:
    # Their output cannot render from a fork; the dashboard replaces them.
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from .trainer_callback import TpuNbCallback

    for callback in (PrinterCallback, ProgressCallback, module.DEFAULT_PROGRESS_CALLBACK):
        trainer.remove_callback(callback)
    trainer.add_callback(TpuNbCallback())
