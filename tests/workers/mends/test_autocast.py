"""bf16 autocast in a worker: SDPA gets the rule it has on CUDA, so a decoder's attention (float32 query and key after
the rotary embedding, bf16 value from its projection) runs, in bf16, as a Llama forward under autocast shows."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import tpu_nb
from tpu_nb.workers.mends.autocast import NOTICE


def attention_under_autocast(model: Any) -> tuple[str, Any, Any, float, bool]:
    import torch_xla

    from tpu_nb.workers.cell_api import reporting

    device = torch_xla.device()
    generator = torch.Generator().manual_seed(0)
    query, key = (torch.randn(1, 2, 4, 8, generator=generator) for _ in range(2))
    value = torch.randn(1, 2, 4, 8, generator=generator).bfloat16()
    with torch.autocast("xla", dtype=torch.bfloat16):
        out = torch.nn.functional.scaled_dot_product_attention(query.to(device), key.to(device), value.to(device), is_causal=True)
        model.to(device).train()
        ids = torch.arange(16, device=device).view(2, 8)
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch_xla.sync()
    reporter = reporting.current()
    assert reporter is not None
    return str(out.dtype), out.float().cpu(), (query, key, value), float(loss.detach().cpu()), NOTICE in reporter._notices


def test_attention_with_mixed_dtypes_runs_in_bf16_under_xla_autocast_as_on_cuda() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    )
    dtype, out, (query, key, value), loss, said = tpu_nb.launch(attention_under_autocast, model, progress=False, timeout=300)
    assert dtype == "torch.bfloat16"
    expected = torch.nn.functional.scaled_dot_product_attention(query.bfloat16(), key.bfloat16(), value, is_causal=True).float()
    assert torch.allclose(out, expected, atol=2e-2)
    assert 0 < loss < 10
    assert said
