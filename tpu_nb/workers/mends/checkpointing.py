"""Activation (gradient) checkpointing on XLA devices, through torch_xla's own `checkpoint`, in a torch_xla worker.

torch's non-reentrant checkpoint, which transformers asks for by default
(and TRL's `SFTConfig`/`DPOConfig` turn on by default), looks up a device
module `torch.xla` that does not exist: the first step raises
"module 'torch' has no attribute 'xla'". torch_xla ships its own copy of the
reentrant checkpoint, with an optimization barrier before the saved inputs so
that XLA does not fold the recomputed forward into the first one (which
would keep every activation and save nothing). In a worker (never in the
notebook), `torch.utils.checkpoint.checkpoint` and transformers' reference
to it become a function that sends XLA tensors there, reentrant, and leaves
any other call to torch's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tpu_nb.workers.cell_api import reporting

NOTICE = (
    "activation checkpointing runs through torch_xla's checkpoint (reentrant): torch's own fails on XLA devices "
    "(module 'torch' has no attribute 'xla'), and torch_xla's keeps XLA from undoing the recomputation"
)
_TRANSFORMERS_MODULE = "transformers.modeling_utils"


def checkpoint_through_torch_xla() -> None:
    """In this worker process: checkpoints of XLA tensors go through torch_xla's `checkpoint` (idempotent)."""
    import torch.utils.checkpoint

    original = torch.utils.checkpoint.checkpoint
    if getattr(original, "_tpu_nb_original", None) is not None:
        return
    routed = _routed(original)
    torch.utils.checkpoint.checkpoint = routed
    modeling_utils = sys.modules.get(_TRANSFORMERS_MODULE)  # imported in the notebook before the fork: its own reference
    if modeling_utils is not None and getattr(modeling_utils, "checkpoint", None) is original:
        modeling_utils.checkpoint = routed  # type: ignore[attr-defined]


def _routed(original: Callable[..., Any]) -> Callable[..., Any]:
    def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None, **kwargs: Any) -> Any:
        if not any(_on_xla(arg) for arg in args):
            return original(function, *args, use_reentrant=use_reentrant, **kwargs)
        from torch_xla.utils.checkpoint import checkpoint as xla_checkpoint

        reporting.notice(NOTICE)
        # torch_xla supports only the reentrant form; its one option besides is preserve_rng_state.
        kept = {name: value for name, value in kwargs.items() if name == "preserve_rng_state"}
        return xla_checkpoint(function, *args, use_reentrant=True, **kept)

    checkpoint._tpu_nb_original = original  # type: ignore[attr-defined]
    return checkpoint


def _on_xla(value: Any) -> bool:
    device = getattr(value, "device", None)
    return getattr(device, "type", None) == "xla"
