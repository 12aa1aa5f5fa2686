"""What the checks run in the workers: small, fixed programs on this machine's real device.

Imported in the kernel (the functions travel by fork), so torch_xla is
imported only inside the functions: only the workers touch a device.
"""

from __future__ import annotations

import os
import time
from typing import Any

import tpu_nb

SEQUENCE = 32
BATCH = 8
VOCABULARY = 512
BERT_LAYERS, BERT_WIDTH = 2, 32


def tiny_bert() -> Any:
    """A 2-layer BERT of hidden size 32 for classification, without dropout (runs compare exactly)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    settings: dict[str, Any] = dict(
        vocab_size=VOCABULARY,
        hidden_size=BERT_WIDTH,
        num_hidden_layers=BERT_LAYERS,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=SEQUENCE,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=2,
    )
    return BertForSequenceClassification(BertConfig(**settings))


def bert_batch(device: Any, seed: int = 1) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, VOCABULARY, (BATCH, SEQUENCE), generator=generator).to(device),
        "labels": torch.randint(0, 2, (BATCH,), generator=generator).to(device),
    }


def compilations() -> int:
    """XLA compilations so far in this process."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return 0 if data is None else int(data[0])


def who_am_i() -> dict[str, Any]:
    """This worker's rank, world, device and process, after a first program ran on its device."""
    import torch
    import torch_xla
    import torch_xla.runtime as xr

    device = torch_xla.device()
    ran = float(torch.ones(4, device=device).sum().item()) == 4.0
    return {
        "rank": int(xr.global_ordinal()),
        "world_size": int(xr.world_size()),
        "devices": int(xr.global_runtime_device_count()),
        "device": str(device),
        "pid": os.getpid(),
        "ran": ran,
    }


def train_step(layer: Any, optimizer: Any, inputs: Any, averaged: bool = False) -> Any:
    """One step of the checks' small models (the mean square of `layer(inputs)` down its gradient), compiled and run; its loss.

    `averaged`: through `xm.optimizer_step`, which averages the gradients over every rank first.
    """
    import torch_xla
    import torch_xla.core.xla_model as xm

    loss = layer(inputs).pow(2).mean()
    loss.backward()
    if averaged:
        xm.optimizer_step(optimizer)
    else:
        optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    return loss


def collectives(steps: int = 3) -> dict[str, Any]:
    """An all_reduce of rank + 1, then a few `xm.optimizer_step`s on different data per rank; the weights after."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    device = torch_xla.device()
    rank, world = int(xr.global_ordinal()), int(xr.world_size())
    total = xm.all_reduce(xm.REDUCE_SUM, torch.tensor([float(rank + 1)], device=device))
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 4).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own data: equal weights come from the averaged gradients
    for _ in range(steps):
        train_step(layer, optimizer, torch.randn(8, 16, generator=generator).to(device), averaged=True)
    weights = torch.cat([parameter.detach().cpu().flatten() for parameter in layer.parameters()])
    return {"sum": float(total.cpu()[0]), "expected": world * (world + 1) / 2, "weights": weights}


def bert_steps(steps: int, warm_up: int, reporting: bool = True) -> dict[str, float]:
    """A small BERT's training loop: steps/s after `warm_up` steps, compilations after them, CPU time in `report()` per step
    (which counts each step's tokens and samples), and the model's training FLOPs per token (6N plus attention)."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    model = tiny_bert().to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)  # a smaller graph than AdamW's: less to compile on XLA:CPU
    batch = bert_batch(device)
    total = warm_up + steps
    started = compiled = 0.0
    report_cpu = 0.0
    for step in range(1, total + 1):
        if step == warm_up + 1:
            xm.wait_device_ops()
            started, compiled = time.perf_counter(), compilations()
        loss = model(**batch).loss
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        torch_xla.sync()
        if reporting:
            before = time.process_time()
            tpu_nb.report(step=step, loss=loss, max_steps=total, tokens=BATCH * SEQUENCE, samples=BATCH)
            if step > warm_up:
                report_cpu += time.process_time() - before
    xm.wait_device_ops()
    elapsed = time.perf_counter() - started
    return {
        "steps_per_second": steps / elapsed,
        "compilations_after_warm_up": compilations() - compiled,
        "report_cpu_ms_per_step": 1000 * report_cpu / steps,
        "flops_per_token": 6 * model.num_parameters(exclude_embeddings=True) + 12 * BERT_LAYERS * BERT_WIDTH * SEQUENCE,
    }


def stoppable_loop(steps: int = 10_000) -> dict[str, Any]:
    """A loop that reports every step until it is stopped; the step it stopped at and the model (on the CPU)."""
    import torch
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 4).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.01)
    step = 0
    try:
        for step in range(1, steps + 1):
            loss = train_step(layer, optimizer, torch.ones(8, 16, device=device))
            tpu_nb.report(step=step, loss=loss)
            time.sleep(0.05)
    except tpu_nb.StopTraining:
        pass
    model = layer.cpu()
    return {"stopped_at": step, "model": model, "checksum": checksum(model.state_dict().values())}


def spin() -> None:
    """Runs programs forever without a step boundary: only a hard stop ends it."""
    import torch
    import torch_xla

    device = torch_xla.device()
    value = torch.zeros(4, device=device)
    while True:
        value = value + 1
        torch_xla.sync()
        time.sleep(0.01)


def big_result(megabytes: int) -> dict[str, Any]:
    """A model after a step on the device and a tensor of `megabytes`, on the CPU, with their checksums."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch.autograd.backward(model(torch.ones(16, 64, device=device)).pow(2).mean())
    xm.optimizer_step(optimizer)
    torch_xla.sync()
    # Made on the host: what is checked is the way back to the notebook (a device-made tensor this big compiles for minutes on XLA:CPU).
    tensor = torch.empty(megabytes * 2**20 // 4).uniform_(generator=torch.Generator().manual_seed(7))
    model = model.cpu()
    return {
        "model": model,
        "model_checksum": checksum(model.state_dict().values()),
        "tensor": tensor,
        "tensor_checksum": checksum([tensor]),
    }


def checksum(tensors: Any) -> float:
    """A float64 sum of the tensors' values (the same in worker and kernel when every byte came back)."""
    return float(sum(float(tensor.double().sum()) for tensor in tensors))


def checkpointed_loop(steps: int) -> dict[str, Any]:
    """SGD with momentum (state a resume must bring back) on data fixed per step, tracked for checkpoints: steps 0 to `steps` - 1."""
    import torch
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 4).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.05, momentum=0.9)
    start = tpu_nb.checkpoint.track(model=layer, optimizer=optimizer)
    for step in range(start, steps):  # `track` gives the step after the checkpoint's last one
        generator = torch.Generator().manual_seed(1000 + step)
        loss = train_step(layer, optimizer, torch.randn(8, 16, generator=generator).to(device))
        tpu_nb.report(step=step, loss=loss, max_steps=steps)
    return {"started_at": start, "weights": torch.cat([parameter.detach().cpu().flatten() for parameter in layer.parameters()])}


def bf16_step() -> dict[str, Any]:
    """One training step in bfloat16 through what a transformer's layer does (embedding, layer norm, softmax, cross-entropy); its loss.

    Not the whole BERT: compiling it again in bfloat16 takes 15 s on XLA:CPU, and the loop check compiles it already.
    """
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    torch.manual_seed(0)
    embedding, norm, head = torch.nn.Embedding(VOCABULARY, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 2)
    model = torch.nn.ModuleList([embedding, norm, head]).to(torch.bfloat16).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = bert_batch(device)
    hidden = norm(embedding(batch["input_ids"]))
    attention = torch.softmax(hidden @ hidden.transpose(1, 2) / 32**0.5, dim=-1) @ hidden
    loss = torch.nn.functional.cross_entropy(head(attention.mean(dim=1)), batch["labels"])
    torch.autograd.backward(loss)
    xm.optimizer_step(optimizer)
    torch_xla.sync()
    return {"loss": float(loss.float().cpu()), "dtype": str(loss.dtype)}


def sharded_bytes() -> dict[str, Any]:
    """Under --spmd: the small BERT sharded over every device; bytes per device, in all, and what an exact 1/N split gives."""
    import torch_xla.runtime as xr

    from tpu_nb import spmd

    devices = int(xr.global_runtime_device_count())
    model = spmd.shard_model(tiny_bert())
    parameters = list(model.parameters())
    whole = sum(parameter.numel() * parameter.element_size() for parameter in parameters)
    split = sum(
        parameter.numel() * parameter.element_size() // (devices if spmd.partition_spec(tuple(parameter.shape), devices) else 1)
        for parameter in parameters
    )
    return {"devices": devices, "per_device": spmd.bytes_per_device(parameters), "whole": whole, "split": split}


def torch_tpu_step() -> float:
    """One step of a small layer on TorchTPU's device, in whatever mode the run uses (not run here: no TPU)."""
    import torch

    device = torch.device("tpu")
    layer = torch.nn.Linear(16, 4).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    loss = layer(torch.ones(8, 16, device=device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    return float(loss.detach().cpu())
