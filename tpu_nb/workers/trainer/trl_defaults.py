"""TRL's trainers on XLA: `pad_to_multiple_of="auto"` pads as TRL itself does on Neuron, and the metrics TRL reads from
the device at every step are read at its logging steps instead.

- Padding: TRL's collators pad each batch to its longest sequence, so each
  new length compiles the whole step again (measured: 46 compilations in 24
  steps of SFTTrainer on XLA:CPU, 13 with "auto" padded to max_length 32:
  docs/guides/language-models.md). TRL's
  `pad_to_multiple_of="auto"` (the default of SFTConfig and DPOConfig) pads
  to a multiple of 128 on Neuron, which compiles once per shape like XLA, and
  not at all elsewhere. In a torch_xla worker "auto" pads on XLA too: to a
  multiple of 128, or to `max_length` when that is shorter (one shape); SFT's
  packed batches, flattened into one sequence (packing's "bfd" strategies),
  to batch size x max_length, which bounds them (one shape: measured 46
  compilations in 16 steps unpadded, 15 padded, as many as unflattened
  "wrapped" packing). A value the user gave is kept, and the doctor is told
  how the trainer pads, to name the config's line if shapes still change.
- Metric reads: `compute_loss` of SFTTrainer, DPOTrainer and the other TRL
  trainers gathers entropy, token accuracy, token counts and rewards and
  reads each with `.item()`: a host sync each, four per SFT step and a dozen
  per DPO step. `deferred_metrics` keeps those values on the device until the
  trainer logs them.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from tpu_nb.workers.cell_api import reporting
from tpu_nb.workers.doctor.probe import WorkerDoctor
from tpu_nb.workers.doctor.trl_padding import TrlPadding
from tpu_nb.workers.mends.import_hooks import when_imported
from tpu_nb.workers.trainer.deferred_metrics import defer_metric_reads

AUTO = "auto"
NEURON_MULTIPLE = 128
"""What TRL pads to on Neuron for the same reason (trl/trainer/sft_config.py)."""
CONFIG_MODULES = {"trl.trainer.sft_config": "SFTConfig", "trl.trainer.dpo_config": "DPOConfig"}


def watch_for_trl() -> None:
    """Patch TRL's configs as they are imported, in this torch_xla worker."""
    for module_name, class_name in CONFIG_MODULES.items():
        when_imported(module_name, functools.partial(_pad_on_xla, class_name=class_name))


def padding_multiple(max_length: int | None, batch_size: int, flattened: bool) -> int:
    """What "auto" pads to on XLA: `max_length` when it is at most 128 (every batch one shape), else multiples of 128;
    a flattened batch of packed rows (at most `max_length` tokens each) to `batch_size` x `max_length` (one shape)."""
    if max_length is None or max_length <= 0:
        return NEURON_MULTIPLE
    if flattened:
        return batch_size * max_length
    return min(max_length, NEURON_MULTIPLE)


def flattens_batches(config: Any) -> bool:
    """Whether SFTTrainer flattens each batch into one sequence (trl/trainer/sft_trainer.py: `padding_free`, or packing
    with a "bfd" strategy, whatever `padding_free` says). DPOTrainer turns padding_free off; its config has no packing."""
    if not hasattr(config, "packing"):
        return False
    packed = bool(config.packing) and getattr(config, "packing_strategy", None) in ("bfd", "bfd_split")
    return bool(getattr(config, "padding_free", False)) or packed


def trl_padding(config: Any) -> TrlPadding | None:
    """How a TRL trainer with this config pads its batches (None for a config without pad_to_multiple_of)."""
    if not hasattr(config, "pad_to_multiple_of"):
        return None
    given, max_length, batch_size = config.pad_to_multiple_of, getattr(config, "max_length", None), config.per_device_train_batch_size
    flattened = flattens_batches(config)
    return TrlPadding(
        type(config).__name__,
        pad_to_multiple_of=given if isinstance(given, int) else None,
        max_length=max_length,
        padding_free=flattened,
        packing=bool(getattr(config, "packing", False)),
        batch_size=batch_size,
        xla_multiple=padding_multiple(max_length, batch_size, flattened),
    )


def is_trl_trainer(trainer: Any) -> bool:
    return type(trainer).__module__.startswith("trl.") and isinstance(getattr(trainer, "_metrics", None), dict)


def mend_trl_trainer(trainer: Any) -> None:
    """A TRL trainer just built in this worker: its per-step metric reads kept off the step."""
    if not is_trl_trainer(trainer) or getattr(trainer, "_tpu_nb_mended", False):
        return
    trainer._tpu_nb_mended = True
    defer_metric_reads(trainer)
    reporter = reporting.current()
    if reporter is not None:
        padding = trl_padding(trainer.args)
        if padding is not None and isinstance(reporter.doctor, WorkerDoctor):
            reporter.doctor.padded_by(padding)
        reporter.notice(
            f"{type(trainer).__name__}: the metrics it reads from the device at every step (entropy, token accuracy, token "
            "counts, rewards) are read at its logging steps instead: on XLA each read stalls the step"
        )


def _pad_on_xla(module: ModuleType, class_name: str) -> None:
    config_class = getattr(module, class_name, None)
    if config_class is None or getattr(config_class, "_tpu_nb_patched", False):
        return
    original_post_init = config_class.__post_init__

    def __post_init__(self: Any) -> None:
        automatic = self.pad_to_multiple_of == AUTO
        original_post_init(self)
        if automatic and self.pad_to_multiple_of is None:
            flattened = flattens_batches(self)
            self.pad_to_multiple_of = padding_multiple(self.max_length, self.per_device_train_batch_size, flattened)
            why = " (packing flattens each batch: per_device_train_batch_size x max_length)" if flattened else ""
            reporting.notice(
                f"{class_name}: pad_to_multiple_of='auto' -> {self.pad_to_multiple_of}{why} on XLA (as TRL pads on "
                "Neuron): each new batch length would compile the step again. Set pad_to_multiple_of yourself to choose."
            )

    config_class.__post_init__ = __post_init__
    config_class._tpu_nb_patched = True
