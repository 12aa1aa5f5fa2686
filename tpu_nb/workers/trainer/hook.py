"""Hugging Face `Trainer` inside a worker: live progress (its batches' tokens and samples counted for tokens/s and MFU),
XLA-safe defaults, FSDPv2 under --spmd, and its checkpoints under --checkpoint (`trainer_checkpoints`).

Only ever applied in forked workers (`watch_for_trainer`), never in the
kernel: the notebook's own transformers is left as it is.
"""

from __future__ import annotations

from typing import Any

from tpu_nb.workers.cell_api import reporting
from tpu_nb.workers.mends.import_hooks import when_imported
from tpu_nb.workers.trainer.batch_counts import ModelFlops, batch_counts, sequence_length
from tpu_nb.workers.trainer.fsdp_v2 import mend_xla_fsdp, with_fsdp_v2
from tpu_nb.workers.trainer.trainer_checkpoints import (
    TrainerCheckpoints,
    checkpointing,
    checkpoints_where_asked,
    keep_the_seed_through_saves,
    option_value,
)
from tpu_nb.workers.trainer.trl_defaults import mend_trl_trainer, watch_for_trl

_TRAINER_MODULE = "transformers.trainer"
# transformers 5 defaults to the fused AdamW on torch >= 2.8, which fails on
# XLA devices ("`fused=True` requires all the params to be floating point
# Tensors of supported devices"). The plain one works.
_XLA_UNSAFE_OPTIM = "adamw_torch_fused"
XLA_SAFE_OPTIM = "adamw_torch"


def watch_for_trainer(spmd: bool = False, xla: bool = True) -> None:
    """Patch `transformers.Trainer` now if it is imported, else as soon as it is (TRL's trainers are Trainers too).

    With `spmd`, a Trainer whose arguments set no FSDP trains with FSDPv2
    over the mesh's "fsdp" axis. Without `xla` (TorchTPU's workers), only
    progress, checkpoints and resuming are tpu_nb's: no XLA defaults.
    """
    when_imported(_TRAINER_MODULE, lambda module: _patch(module, spmd, xla))
    if xla:
        watch_for_trl()


def _patch(module: Any, spmd: bool, xla: bool) -> None:
    trainer_class = module.Trainer
    if getattr(trainer_class, "_tpu_nb_patched", False):
        return
    original_init = trainer_class.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        model = kwargs["model"] if "model" in kwargs else (args[0] if args else None)
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        training_args = _prepared(training_args, model, spmd) if xla else _made(training_args)
        training_args, checkpoints = checkpointing(training_args)
        if len(args) > 1:
            args = (args[0], training_args, *args[2:])
        else:
            kwargs["args"] = training_args
        original_init(self, *args, **kwargs)
        self._tpu_nb_checkpoints = checkpoints
        _replace_progress_callbacks(self, module, checkpoints)

    trainer_class.__init__ = __init__
    checkpoints_where_asked(trainer_class)
    _count_batches(trainer_class)
    if xla:
        keep_the_seed_through_saves(trainer_class)
        mend_xla_fsdp(module)
        _mend_trl_at_train(trainer_class)
    trainer_class._tpu_nb_patched = True


def _count_batches(trainer_class: Any) -> None:
    """Rank 0 counts the tokens and samples of each batch it trains on (each micro-batch of a gradient accumulation),
    and the model's FLOPs per token at the batch's length: its reports carry them (`reporting`)."""
    original_training_step = trainer_class.training_step

    def training_step(self: Any, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        reporter = reporting.current()
        if reporter is not None and reporter.rank == 0:
            main_input = getattr(self.model, "main_input_name", "input_ids")
            reporter.counts.add(*batch_counts(inputs, main_input, getattr(self.processing_class, "pad_token_id", None)))
            length = sequence_length(inputs, main_input)
            if length is not None:
                flops = getattr(self, "_tpu_nb_flops", None)
                if flops is None:
                    flops = self._tpu_nb_flops = ModelFlops(self.floating_point_ops, getattr(self.model, "config", None), main_input)
                reporter.counts.flops_per_token = flops.per_token(length)
        return original_training_step(self, model, inputs, *args, **kwargs)

    trainer_class.training_step = training_step


def _mend_trl_at_train(trainer_class: Any) -> None:
    """A TRL trainer is mended when it starts training: its `__init__` sets up what is mended after `Trainer.__init__`."""
    original_train = trainer_class.train

    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        mend_trl_trainer(self)
        return original_train(self, *args, **kwargs)

    trainer_class.train = train


def _made(training_args: Any) -> Any:
    """The Trainer's arguments, made as Trainer itself would when the cell gives none."""
    if training_args is not None:
        return training_args
    from transformers import TrainingArguments

    return TrainingArguments(output_dir="tmp_trainer")


def _prepared(training_args: Any, model: Any, spmd: bool) -> Any:
    """The Trainer's arguments, made to work on XLA (and, under --spmd, to shard with FSDPv2)."""
    training_args = _made(training_args)
    _make_xla_safe(training_args)
    if spmd and not training_args.fsdp:
        training_args = with_fsdp_v2(training_args, model)
    return training_args


def _make_xla_safe(training_args: Any) -> None:
    """Swap a default fused AdamW for the plain one, and turn the default pinned memory off; explicit choices are kept."""
    fields = type(training_args).__dataclass_fields__
    if training_args.dataloader_pin_memory and fields["dataloader_pin_memory"].default:
        # Pinned memory serves CUDA copies; with none, torch warns at every epoch that it cannot pin.
        training_args.dataloader_pin_memory = False
    field = fields["optim"]
    if option_value(training_args.optim) == _XLA_UNSAFE_OPTIM and option_value(field.default) == _XLA_UNSAFE_OPTIM:
        training_args.optim = XLA_SAFE_OPTIM
        reporting.notice(
            f"Trainer: optim {_XLA_UNSAFE_OPTIM} (the default) -> {XLA_SAFE_OPTIM}: "
            "fused AdamW fails on XLA devices. Set optim= yourself to choose another."
        )


def _replace_progress_callbacks(trainer: Any, module: Any, checkpoints: TrainerCheckpoints | None) -> None:
    # The dashboard shows the training's progress and logs; transformers' other bars (loading, saving) draw as text
    # (mends/progress_bars).
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from tpu_nb.workers.trainer.callback import TpuNbCallback

    for callback in (PrinterCallback, ProgressCallback, module.DEFAULT_PROGRESS_CALLBACK):
        trainer.remove_callback(callback)
    trainer.add_callback(TpuNbCallback(checkpoints))
