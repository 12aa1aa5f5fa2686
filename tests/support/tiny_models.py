"""Models small enough to train in seconds on XLA:CPU, built from a config (nothing is downloaded)."""

from __future__ import annotations

from typing import Any


def tiny_mixtral(experts_per_token: int = 1) -> Any:
    """A one-layer Mixtral with two experts. Transformers 5 fuses a Mixtral's experts when it builds the model, and
    `save_pretrained` saves them one by one. On XLA the experts must run "eager": the default "grouped_mm" calls
    `torch.histc` on int expert ids, which XLA:CPU's fallback cannot run. `experts_per_token=2` sends every token to
    both experts: which tokens reach which expert no longer changes from step to step (fewer compilations)."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=2,
        num_experts_per_tok=experts_per_token,
        experts_implementation="eager",
    )
    return MixtralForCausalLM(config)
