"""What a Trainer's batch holds for tokens/s and MFU: its tokens that are not padding, its samples, the model's FLOPs per token.

Tokens are counted as transformers' `include_num_input_tokens_seen="non_padding"`
counts them (the attention mask's sum, else the main input's tokens that are
not the pad token, else all of them), but never read: a count on the device
stays there (`step_counts`), where transformers' `.item()` would wait for
the device at every step. FLOPs per token are the Trainer's own estimate
(`Trainer.floating_point_ops`, which its `total_flos` adds up: 6 x the
model's parameters without the embeddings) plus attention's 12 x layers x
heads x head size x sequence length (PaLM's appendix B), from its config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

ATTENTION_FLOPS = 12
"""Per token, layer, attention width and position of the sequence: the scores and the weighted sum, forward and backward."""


def batch_counts(inputs: Any, main_input: str, pad_token_id: int | None) -> tuple[Any, Any]:
    """(tokens, samples) of a batch as the Trainer feeds it, each a number or a tensor, None where it cannot be told."""
    if not isinstance(inputs, Mapping):
        return None, None
    ids: Any = inputs.get(main_input)
    shaped = ids if hasattr(ids, "shape") else next((value for value in inputs.values() if hasattr(value, "shape")), None)
    samples = int(shaped.shape[0]) if shaped is not None and len(shaped.shape) > 0 else None
    if not hasattr(ids, "numel"):
        return None, samples
    mask: Any = inputs.get("attention_mask")
    if hasattr(mask, "sum"):
        return mask.sum(), samples
    if pad_token_id is not None:
        return (ids != pad_token_id).sum(), samples
    return int(ids.numel()), samples


class ModelFlops:
    """A model's training FLOPs per token at a sequence length: the Trainer's 6N estimate plus attention, by its config.

    `estimate`: the Trainer's `floating_point_ops` (a subclass's own, if it has one), asked once for one token.
    """

    def __init__(self, estimate: Callable[[dict[str, Any]], float], config: Any, main_input: str) -> None:
        self._dense = _dense_flops_per_token(estimate, main_input)
        self._attention_width = _attention_width(config)  # layers x heads x head size
        self._at: tuple[int, float | None] | None = None  # the last length asked, and its answer

    def per_token(self, length: int) -> float | None:
        """FLOPs per token of a training step (forward and backward) at `length` tokens a sequence; None if unknown."""
        if self._at is None or self._at[0] != length:
            attention = ATTENTION_FLOPS * self._attention_width * length if self._attention_width else 0
            self._at = (length, None if self._dense is None else self._dense + attention)
        return self._at[1]


def sequence_length(inputs: Any, main_input: str) -> int | None:
    """The batch's sequence length: its main input's last dimension."""
    ids = inputs.get(main_input) if isinstance(inputs, Mapping) else None
    shape = getattr(ids, "shape", None)
    return int(shape[-1]) if shape is not None and len(shape) > 1 else None


def _dense_flops_per_token(estimate: Callable[[dict[str, Any]], float], main_input: str) -> float | None:
    """The estimate for a batch of one token (a tensor without data); None where it has none (0: a model it cannot count)."""
    import torch

    flops = float(estimate({main_input: torch.empty((1, 1), device="meta")}))
    return flops if flops > 0 else None


def _attention_width(config: Any) -> int:
    """Layers x heads x head size from a model's (text) config; 0 where it does not say."""
    if config is None:
        return 0
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers, heads = getattr(text, "num_hidden_layers", None), getattr(text, "num_attention_heads", None)
    if not isinstance(layers, int) or not isinstance(heads, int) or heads < 1:
        return 0
    head_size = getattr(text, "head_dim", None)
    if not isinstance(head_size, int):
        hidden = getattr(text, "hidden_size", None)
        head_size = hidden // heads if isinstance(hidden, int) else 0
    return layers * heads * head_size
