"""Does live progress cost training throughput? Measured in one real Jupyter kernel.

The same loop (a small BERT, MpDeviceLoader, xm.optimizer_step) runs
- raw: `xmp.spawn(fn, start_method="fork")`, no tpu_nb, no reporting;
- tpu_nb: `%%tpu_train` with `report(step=..., loss=loss)` every step and
  the live widget dashboard (the XLA doctor on, as by default);
- no_doctor: the same with `--no-doctor`.
Each worker measures its own steps/s after warm-up, its XLA compilations
and its device-to-host transfers (TransferFromDeviceTime samples). Variants
alternate, twice each; the best of each is compared.
Target: identical compile counts, one extra transfer per reporting interval,
throughput ratio >= 0.98; doctor on/off ratio >= 0.99.
"""

from __future__ import annotations

import json
import os
import re

import nbformat
from nbclient import NotebookClient

STEPS, WARMUP = 300, 30

SETUP = f"""
import json, time, torch
from transformers import BertConfig, BertForSequenceClassification
STEPS, WARMUP = {STEPS}, {WARMUP}
ids = torch.randint(10, 200, (STEPS * 32, 32), generator=torch.Generator().manual_seed(0))
labels = (ids[:, 1] > 100).long()
torch.manual_seed(0)
config = BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=64, num_labels=2)
model = BertForSequenceClassification(config)

def train_loop(device, on_step):
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.parallel_loader as pl
    from torch.utils.data import DataLoader, TensorDataset

    def count(name):
        data = met.metric_data(name)
        return 0 if data is None else data[0]

    loader = pl.MpDeviceLoader(DataLoader(TensorDataset(ids, labels), batch_size=32, drop_last=True), device)
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step, (input_ids, batch_labels) in enumerate(loader, start=1):
        if step == WARMUP:
            xm.wait_device_ops()
            started, compiles, transfers = time.perf_counter(), count("CompileTime"), count("TransferFromDeviceTime")
        loss = model(input_ids=input_ids, labels=batch_labels).loss
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        on_step(step, loss)
    xm.wait_device_ops()
    seconds = time.perf_counter() - started
    return {{"steps_per_s": (STEPS - WARMUP) / seconds, "seconds": seconds,
             "compiles_after_warmup": count("CompileTime") - compiles,
             "compiles_total": count("CompileTime"),
             "transfers_after_warmup": count("TransferFromDeviceTime") - transfers}}
"""

RAW = """
import torch_xla, torch_xla.distributed.xla_multiprocessing as xmp

def raw_worker(index):
    figures = train_loop(torch_xla.device(), lambda step, loss: None)
    print("FIGURES raw " + json.dumps(figures), flush=True)

xmp.spawn(raw_worker, start_method="fork")
"""

TPU_NB = """%%tpu_train
figures = train_loop(device, lambda step, loss: report(step=step, loss=loss, max_steps=STEPS, batch_size=32))
print("FIGURES tpu_nb " + json.dumps(figures), flush=True)
"""

NO_DOCTOR = TPU_NB.replace("%%tpu_train", "%%tpu_train --no-doctor").replace("FIGURES tpu_nb", "FIGURES no_doctor")


def main() -> None:
    notebook = nbformat.v4.new_notebook()
    cells = [SETUP, "%load_ext tpu_nb"] + [RAW, TPU_NB, NO_DOCTOR] * 2
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    NotebookClient(notebook, timeout=1200, kernel_name="python3").execute(env=dict(os.environ, PJRT_DEVICE="CPU"))
    results: dict[str, list[dict[str, float]]] = {"raw": [], "tpu_nb": [], "no_doctor": []}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for match in re.finditer(r"FIGURES (\w+) (\{.*\})", output.get("text", "")):
                results[match.group(1)].append(json.loads(match.group(2)))
    best = {name: max(runs, key=lambda run: run["steps_per_s"]) for name, runs in results.items()}
    print(f"{STEPS - WARMUP} steps after {WARMUP} warm-up steps, tiny BERT, XLA:CPU, one worker")
    for name, runs in results.items():
        rates = ", ".join(f"{run['steps_per_s']:.2f}" for run in runs)
        figure = best[name]
        print(
            f"{name:>7}: steps/s {rates} (best {figure['steps_per_s']:.2f}) | compilations after warm-up "
            f"{figure['compiles_after_warmup']} (total {figure['compiles_total']}) | "
            f"device-to-host transfers after warm-up {figure['transfers_after_warmup']}"
        )
    ratio = best["tpu_nb"]["steps_per_s"] / best["raw"]["steps_per_s"]
    extra = best["tpu_nb"]["transfers_after_warmup"] - best["raw"]["transfers_after_warmup"]
    print(f"throughput ratio tpu_nb/raw: {ratio:.3f} (target >= 0.98)")
    doctor = best["tpu_nb"]["steps_per_s"] / best["no_doctor"]["steps_per_s"]
    print(f"throughput ratio doctor on/off: {doctor:.3f} (target >= 0.99)")
    print(
        f"extra transfers: {extra} over {best['tpu_nb']['seconds']:.1f}s "
        f"(at most one per 0.25 s reporting interval: {best['tpu_nb']['seconds'] / 0.25:.0f})"
    )


if __name__ == "__main__":
    main()
