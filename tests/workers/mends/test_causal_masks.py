"""A decoder's causal mask in a worker is built on the device without reading the padding mask: no host sync in the
forward, and the logits of the tokens that are not padding are those the CPU computes."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import tpu_nb

IDS = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])


def logits_on_xla(model: Any) -> tuple[Any, int]:
    import torch_xla
    import torch_xla.debug.metrics as metrics

    device = torch_xla.device()
    model.to(device).eval()

    def transfers() -> int:
        data = metrics.metric_data("TransferFromDeviceTime")
        return 0 if data is None else int(data[0])

    before = transfers()
    with torch.no_grad():
        logits = model(input_ids=IDS.to(device), attention_mask=MASK.to(device)).logits
    during = transfers() - before
    return logits.cpu(), during


def test_a_padded_batch_runs_without_a_host_sync_and_gives_the_cpus_logits() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    ).eval()
    with torch.no_grad():
        expected = model(input_ids=IDS, attention_mask=MASK).logits
    logits, reads = tpu_nb.launch(logits_on_xla, model, progress=False, timeout=300)
    assert reads == 0  # transformers asked the device whether the mask was all ones: two syncs per forward
    assert torch.allclose(logits[0], expected[0], atol=1e-4)
    assert torch.allclose(logits[1, :3], expected[1, :3], atol=1e-4)  # padding's own logits are not compared
