"""A Trainer under --spmd: FSDPv2 over the mesh's "fsdp" axis, and what transformers' XLA FSDP path needs mended.

Only ever applied in forked workers (through `hook`), never in the kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from tpu_nb.workers.cell_api import reporting
from tpu_nb.workers.mends.import_hooks import when_imported


def with_fsdp_v2(training_args: Any, model: Any) -> Any:
    """FSDPv2 over the global mesh's "fsdp" axis, wrapping the model's own layer classes."""
    layers = list(getattr(model, "_no_split_modules", None) or [])
    config: dict[str, Any] = {"xla": True, "xla_fsdp_v2": True}
    if layers:
        config["transformer_layer_cls_to_wrap"] = layers
    reporting.notice(
        f"Trainer under --spmd: FSDPv2, parameters sharded along the mesh's fsdp axis, wrapping "
        f"{', '.join(layers) if layers else 'the whole model'}. Set fsdp and fsdp_config yourself to choose."
    )
    return dataclasses.replace(training_args, fsdp=True, fsdp_config=config)


def mend_xla_fsdp(module: Any) -> None:
    """Three transformers bugs with XLA FSDP, mended in the worker (found on 5.15, 5.24 and 5.25).

    - For XLA FSDP the Trainer delays creating the optimizer until the model
      is wrapped, then never creates it because the wrapped model is not
      `self.model` (`create_scheduler` fails: 'NoneType' object has no
      attribute 'param_groups'). Create it over the wrapped model.
    - `save_model` saves an FSDPv2-wrapped model's state dict with the
      wrappers' `_orig_module.` in every key, so `from_pretrained` loads none
      of it (and PEFT saves an empty adapter). Save the full weights (the
      shards gathered) under their own names.
    - FSDPv2's `shard_output` (transformers' integrations/tpu.py) pins the
      sharding of a model's logits and raises "the output of the model
      shouldn't be `None`" for any other output: TRL's trainers call the model
      with `fused_lm_head=True`, whose output has log-probabilities and no
      logits. Such an output is left to XLA's sharding propagation.
    """
    when_imported(FSDP_V2_MODULE, _shard_any_output)
    trainer_class = module.Trainer
    original_wrap = trainer_class._wrap_model

    def _wrap_model(self: Any, model: Any, training: bool = True, dataloader: Any = None) -> Any:
        wrapped = original_wrap(self, model, training, dataloader)
        if training and self.is_fsdp_xla_enabled and self.optimizer is None:
            self.create_optimizer(wrapped)
        return wrapped

    trainer_class._wrap_model = _wrap_model
    original_save = module.save_tpu_checkpoint

    def save_tpu_checkpoint(model: Any, args: Any, accelerator: Any, processing_class: Any, *rest: Any, **options: Any) -> None:
        if type(model).__name__ != "SpmdFullyShardedDataParallel":
            original_save(model, args, accelerator, processing_class, *rest, **options)
            return
        output_dir = options.get("output_dir") or (rest[1] if len(rest) > 1 else None) or args.output_dir
        _save_full_weights(model, args, processing_class, output_dir)

    module.save_tpu_checkpoint = save_tpu_checkpoint


FSDP_V2_MODULE = "torch_xla.experimental.spmd_fully_sharded_data_parallel"


def _shard_any_output(module: Any) -> None:
    """FSDPv2 wrappers built from now on get transformers' `shard_output` only for outputs it knows."""
    wrapper_class = module.SpmdFullyShardedDataParallel
    if getattr(wrapper_class, "_tpu_nb_patched", False):
        return
    original_init = wrapper_class.__init__

    def __init__(self: Any, *args: Any, shard_output: Any = None, **kwargs: Any) -> None:
        if shard_output is not None and getattr(shard_output, "__module__", "").startswith("transformers."):
            shard_output = _when_logits(shard_output)
        original_init(self, *args, shard_output=shard_output, **kwargs)

    wrapper_class.__init__ = __init__
    wrapper_class._tpu_nb_patched = True


def _when_logits(shard_output: Any) -> Any:
    import torch

    def shard_logits(output: Any, mesh: Any) -> None:
        if isinstance(output, torch.Tensor | tuple) or type(output).__name__ == "CausalLMOutputWithPast":
            shard_output(output, mesh)  # what transformers knows, as it does it
            return
        logits = getattr(output, "logits", None)
        if isinstance(logits, torch.Tensor) and logits.dim() == 3:
            import torch_xla.distributed.spmd as xs

            xs.mark_sharding(logits, mesh, ("fsdp", None, None))

    return shard_logits


def _save_full_weights(model: Any, args: Any, processing_class: Any, output_dir: str) -> None:
    import torch
    import torch_xla

    torch_xla.sync()
    inner = model.module
    with _layers_unwrapped(inner):
        # Under its own names (what from_pretrained and PEFT's adapter saving
        # look for); .cpu() gathers each tensor's shards.
        state = {key: tensor.cpu() for key, tensor in inner.state_dict().items()}
        os.makedirs(output_dir, exist_ok=True)
        torch.save(args, os.path.join(output_dir, "training_args.bin"))
        # save_pretrained empties the dict it is given: hand it a copy.
        inner.save_pretrained(output_dir, state_dict=dict(state))
    if processing_class is not None:
        processing_class.save_pretrained(output_dir)


@contextlib.contextmanager
def _layers_unwrapped(root: Any) -> Iterator[None]:
    """Put FSDPv2's layer wrappers aside for a moment, so every module has its own name again."""
    swapped = []
    for parent in list(root.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ == "SpmdFullyShardedDataParallel":
                setattr(parent, name, child._orig_module)
                swapped.append((parent, name, child))
    try:
        yield
    finally:
        for parent, name, child in reversed(swapped):
            setattr(parent, name, child)
