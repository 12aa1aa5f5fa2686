"""transformers' causal masks built without reading the attention mask's values on XLA, in a torch_xla worker.

Before each forward of a decoder, transformers' `sdpa_mask` asks whether the
padding mask is all ones (`_ignore_causal_mask_sdpa`): if so it drops the mask
and lets SDPA apply `is_causal` instead. On XLA that question reads the mask
from the device: two host syncs per forward (measured on Llama in
SFTTrainer), and the step's graph depends on the batch's data (with a mask
or without). transformers skips the question for tensors that are being
traced (torch.compile, export); XLA's tensors are traced too, lazily. In a
worker, transformers' masks count an XLA tensor as traced, so the mask is
always built on the device: no sync, one graph. Only `masking_utils`'
reference is changed (the notebook's transformers is left as it is).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

MASKS_MODULE = "transformers.masking_utils"


def trace_xla_masks(module: ModuleType) -> None:
    """`module` is transformers.masking_utils, just imported (or imported before the fork)."""
    original = getattr(module, "is_tracing", None)
    if original is None or getattr(original, "_tpu_nb_original", None) is not None:
        return
    module.is_tracing = _counting_xla(original)  # type: ignore[attr-defined]


def _counting_xla(original: Callable[..., bool]) -> Callable[..., bool]:
    def is_tracing(tensor: Any = None) -> bool:
        return original(tensor) or getattr(getattr(tensor, "device", None), "type", None) == "xla"

    is_tracing._tpu_nb_original = original  # type: ignore[attr-defined]
    return is_tracing
