"""What the XLA doctor's "Host syncs" advice is worth, measured: a per-step `.item()` vs reading the loss lazily.

The same loop (tiny BERT, MpDeviceLoader, xm.optimizer_step) runs in a
tpu_nb worker twice: once reading `loss.item()` every step (the mistake the
doctor names), once passing the lazy loss to `report(loss=...)` (its fix).
Each measures its own steps/s after warm-up. Run: `make benchmark`.
"""

from __future__ import annotations

import time

import torch

import tpu_nb

STEPS, WARMUP = 200, 20


def train(read_every_step: bool) -> float:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    from torch.utils.data import DataLoader, TensorDataset
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, num_labels=2)
    device = torch_xla.device()
    model = BertForSequenceClassification(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(10, 200, (STEPS * 16, 32), generator=torch.Generator().manual_seed(0))
    loader = pl.MpDeviceLoader(DataLoader(TensorDataset(ids, (ids[:, 1] > 100).long()), batch_size=16, drop_last=True), device)
    started = 0.0
    for step, (input_ids, labels) in enumerate(loader, start=1):
        if step == WARMUP:
            xm.wait_device_ops()
            started = time.perf_counter()
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        tpu_nb.report(step=step, loss=loss.item() if read_every_step else loss)
    xm.wait_device_ops()
    return (STEPS - WARMUP) / (time.perf_counter() - started)


def main() -> None:
    rates = {}
    for label, read_every_step in (("loss.item() every step", True), ("report(loss=loss), read lazily", False)):
        rates[label] = max(tpu_nb.launch(train, read_every_step, progress=False) for _ in range(2))
    print(f"{STEPS - WARMUP} steps after {WARMUP} warm-up steps, tiny BERT, XLA:CPU, one worker (best of 2)")
    for label, rate in rates.items():
        print(f"{label:>32}: {rate:.2f} steps/s")
    slow, fast = rates.values()
    print(f"speed-up from the doctor's fix: {fast / slow:.2f}x")


if __name__ == "__main__":
    main()
