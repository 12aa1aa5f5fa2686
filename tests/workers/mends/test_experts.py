"""A mixture-of-experts model with transformers' default experts implementation (grouped_mm, which fails on XLA) trains
in a worker: its experts run eager there, with the CPU's results; the notebook's model keeps its own choice."""

from __future__ import annotations

from typing import Any

import torch
from transformers import MixtralConfig, MixtralForCausalLM

import tpu_nb
from tpu_nb.workers.mends.experts import NOTICE

IDS = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])


def step_on_xla(model: Any) -> tuple[Any, Any, bool]:
    import torch_xla

    from tpu_nb.workers.cell_api import reporting

    device = torch_xla.device()
    model.to(device).train()
    ids = IDS.to(device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch_xla.sync()
    reporter = reporting.current()
    assert reporter is not None
    gate = model.model.layers[0].mlp.experts.gate_up_proj.grad
    return out.logits.detach().cpu(), gate.cpu(), NOTICE in reporter._notices


def test_a_mixtral_with_the_default_experts_trains_on_xla_as_on_the_cpu() -> None:
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    model = MixtralForCausalLM(config)
    assert model.config._experts_implementation == "grouped_mm"  # transformers' default, as the notebook built it
    expected = model(input_ids=IDS).logits.detach()
    logits, gate_gradient, said = tpu_nb.launch(step_on_xla, model, progress=False, timeout=300)
    assert torch.allclose(logits, expected, atol=1e-4)
    assert gate_gradient.abs().sum() > 0
    assert said
    assert model.config._experts_implementation == "grouped_mm"
