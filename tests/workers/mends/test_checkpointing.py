"""Activation checkpointing in a worker goes through torch_xla's checkpoint: a decoder with it on trains on XLA, with the
gradients it has without it, and the notebook's torch is left as it was."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import tpu_nb
from tpu_nb.workers.mends.checkpointing import NOTICE


def tiny_llama() -> Any:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1
    )
    return LlamaForCausalLM(config)


def gradients_with_and_without_checkpointing(model: Any) -> tuple[dict[str, Any], dict[str, Any], bool, bool]:
    """In the worker: one backward on XLA with checkpointing, one without; and what it said."""
    import torch_xla

    from tpu_nb.workers.cell_api import reporting

    device = torch_xla.device()
    model.to(device).train()
    ids = torch.arange(32, device=device).view(2, 16) % 64
    found = []
    for checkpointing in (True, False):
        if checkpointing:
            model.gradient_checkpointing_enable()  # transformers asks torch for the non-reentrant form
        else:
            model.gradient_checkpointing_disable()
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        torch_xla.sync()  # one graph for the whole step, then each gradient is only copied
        found.append({name: parameter.grad.cpu() for name, parameter in model.named_parameters()})
    reporter = reporting.current()
    assert reporter is not None
    cpu_kept_torch_s = torch.utils.checkpoint.checkpoint(torch.sin, torch.ones(2, requires_grad=True), use_reentrant=False).sum() > 0
    return found[0], found[1], NOTICE in reporter._notices, bool(cpu_kept_torch_s)


def test_a_decoder_with_activation_checkpointing_trains_on_xla_with_the_same_gradients() -> None:
    original = torch.utils.checkpoint.checkpoint
    checkpointed, plain, said, cpu_call = tpu_nb.launch(gradients_with_and_without_checkpointing, tiny_llama(), progress=False, timeout=300)
    assert checkpointed.keys() == plain.keys() and len(plain) > 10
    for name, gradient in plain.items():
        assert torch.allclose(checkpointed[name], gradient, atol=1e-5), name
    assert any(gradient.abs().sum() > 0 for gradient in plain.values())
    assert said  # the dashboard says once that checkpoints go through torch_xla
    assert cpu_call  # a checkpoint of CPU tensors in the worker is still torch's own
    assert torch.utils.checkpoint.checkpoint is original  # the notebook's torch is left as it was
