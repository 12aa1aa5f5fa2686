"""bf16 autocast on XLA that attention survives: `scaled_dot_product_attention` joins XLA's lower-precision ops.

torch's autocast casts SDPA's query, key and value to the autocast dtype on
CUDA, but its XLA policy leaves SDPA out. A decoder under
`torch.autocast("xla", dtype=torch.bfloat16)` (what `TrainingArguments(bf16=True)`
sets through accelerate, and TRL's configs turn on by default) then hands
SDPA bf16 values from its projections and float32 queries and keys from the
rotary embedding, and SDPA raises "Expected query, key, and value to have the
same dtype". In a worker (never in the notebook) SDPA gets the same rule
on XLA as on CUDA: its floating inputs cast to the autocast dtype.
"""

from __future__ import annotations

from typing import Any

from tpu_nb.workers.cell_api import reporting

NOTICE = (
    "bf16 autocast: scaled_dot_product_attention runs in bf16 on XLA as it does on CUDA (XLA's autocast leaves it out, "
    "and attention then fails on a float32 query with a bf16 value)"
)
_registration: Any = None  # the library registration lives as long as the process


def attention_in_autocast_dtype() -> None:
    """Register SDPA's autocast rule for XLA in this worker process (idempotent)."""
    global _registration
    if _registration is not None:
        return
    import torch

    library = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
    library.impl("scaled_dot_product_attention", _sdpa_in_autocast_dtype, "AutocastXLA")  # type: ignore[no-untyped-call]
    _registration = library


def _sdpa_in_autocast_dtype(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    import torch

    dtype = torch.get_autocast_dtype("xla")
    if len({query.dtype, key.dtype, value.dtype}) > 1:
        reporting.notice(NOTICE)

    def cast(tensor: Any) -> Any:
        return tensor.to(dtype) if tensor is not None and tensor.is_floating_point() else tensor

    with torch.autocast("xla", enabled=False):  # what CUDA's rule does: cast, then run the op itself
        return torch.ops.aten.scaled_dot_product_attention(
            cast(query), cast(key), cast(value), cast(attn_mask), dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )
