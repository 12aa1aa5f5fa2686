"""Per-device parameter memory under SPMD: FSDP-sharded vs replicated, measured on 4 XLA:CPU devices.

    PJRT_DEVICE=CPU python benchmarks/spmd_memory.py

A Llama-style model (built from a config, 8 layers) is put on the devices of
one SPMD worker twice: replicated (what one data-parallel replica per core
holds) and split along the fsdp axis with `tpu_nb.spmd.shard_model`. The
bytes each device holds are read from the tensors' local shards.
"""

from __future__ import annotations

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

import tpu_nb

DEVICES = 4


def measure() -> dict[str, int]:
    import torch
    import torch_xla
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8
    )
    torch.manual_seed(0)
    replicated = LlamaForCausalLM(config).to(torch_xla.device())
    sharded = tpu_nb.spmd.shard_model(LlamaForCausalLM(config))
    torch_xla.sync()
    return {
        "parameters": sum(parameter.numel() for parameter in replicated.parameters()),
        "replicated": tpu_nb.spmd.bytes_per_device(replicated.parameters()),
        "fsdp": tpu_nb.spmd.bytes_per_device(sharded.parameters()),
    }


if __name__ == "__main__":
    figures = tpu_nb.launch(measure, spmd=True, cores=DEVICES, progress=False)
    print(f"model: {figures['parameters'] / 1e6:.1f}M parameters (f32), {DEVICES} XLA:CPU devices, one SPMD worker")
    print(f"per-device parameter bytes, replicated: {figures['replicated'] / 2**20:.1f} MiB")
    print(f"per-device parameter bytes, fsdp:       {figures['fsdp'] / 2**20:.1f} MiB")
    print(f"ratio fsdp/replicated: {figures['fsdp'] / figures['replicated']:.4f} (1/{DEVICES} = {1 / DEVICES:.4f})")
