"""What do checkpoints cost the training loop? Measured with tpu_nb.launch, each run in its own forked worker.

The same loop (a 3-layer MLP of 2048 units, AdamW, a sync per step, so each
checkpoint holds about 150 MB: weights and both AdamW moments) runs
- plain: no checkpoints;
- checkpointed: `checkpoint=DIR, every="50steps"` with `tpu_nb.checkpoint.track(...)`.
Each worker measures its own steps/s after warm-up (the compilations).
From each checkpoint's record: how long the step waited (the copy of the
state to host memory: all the loop should wait for), and how long the
background write, reload and check took. Variants alternate, ROUNDS times
each; medians are compared. Target: the stall per save is the host copy
(a small share of the write), and throughput stays close to plain; on
XLA:CPU the background write competes with training for the same two
cores, which a TPU host (whose device computes apart) does not.

Then the host memory of a run's first two saves, in a fresh worker: a thread
samples the process's resident set (/proc/self/statm) every millisecond from
just before the step that saves until the checkpoint is written and checked
(training waits meanwhile, so only the save moves it), for the MLP above and
for one of 12 layers of 1024 (about the same state in smaller tensors).
Target: at most the state's size plus 10% beyond what the run held before
the save (the host copy of the state, and a file read back a record at a
time, not a second copy). `python benchmarks/checkpoint_overhead.py memory`
measures only that.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import tpu_nb
from tpu_nb.wire.checkpoints import list_checkpoints

STEPS, WARMUP, EVERY = 200, 20, 50
ROUNDS = 3
WIDTH = 2048


def train(steps: int, warmup: int) -> dict[str, float]:
    """In a worker: the loop, its steps/s after warm-up, and the host copy of its state timed once by hand."""
    import torch
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH)
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tpu_nb.checkpoint.track(model=model, optimizer=optimizer)
    batch = torch.randn(16, WIDTH).to(device)
    started = time.perf_counter()
    for step in range(steps):
        if step == warmup:
            torch_xla.sync()
            started = time.perf_counter()
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        tpu_nb.report(step=step, loss=loss, max_steps=steps)
    torch_xla.sync()
    seconds = time.perf_counter() - started
    copy_started = time.perf_counter()
    copies = [tensor.detach().to("cpu", copy=True) for tensor in model.state_dict().values()]
    copies += [value.detach().to("cpu", copy=True) for state in optimizer.state.values() for value in state.values()]
    return {"steps_per_second": (steps - warmup) / seconds, "host_copy_seconds": time.perf_counter() - copy_started}


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakSampler:
    """The highest resident set size sampled every millisecond while running (a thread: torch's memory is not Python's)."""

    def __init__(self) -> None:
        self.peak = resident_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, resident_bytes())

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exception: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, resident_bytes())


def save_memory(steps: int, layers: int, width: int) -> list[dict[str, float]]:
    """In a worker saving every `steps` steps an MLP of `layers` layers of `width` units: for its first two saves (the steps
    before them report no step), the resident set just before the step's save, and its peak until that save was checked."""
    import torch
    import torch_xla

    from tpu_nb.workers.cell_api import reporting

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _layer in range(layers))).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tpu_nb.checkpoint.track(model=model, optimizer=optimizer)
    checkpointer = reporting.current().checkpointer  # type: ignore[union-attr]
    batch = torch.randn(16, width).to(device)
    saves: list[dict[str, float]] = []
    for step in range(1, 2 * steps + 1):
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        if step % steps:
            tpu_nb.report(loss=loss)
            continue
        # Memory freed earlier but kept by the C allocator would be reused by the save, and hide what it costs.
        ctypes.CDLL(None).malloc_trim(0)
        before = resident_bytes()
        with PeakSampler() as sampler:
            tpu_nb.report(step=step, loss=loss)  # saves: the host copy, then the write and its check in the background
            checkpointer.wait()
        tensors = list(model.state_dict().values()) + [value for state in optimizer.state.values() for value in state.values()]
        state = sum(tensor.numel() * tensor.element_size() for tensor in tensors if isinstance(tensor, torch.Tensor))
        saves.append({"before": before, "peak": sampler.peak, "state": state})
    return saves


def main() -> None:
    if sys.argv[1:] != ["memory"]:  # `python benchmarks/checkpoint_overhead.py memory`: the memory of saves alone
        throughput()
    memory()


def throughput() -> None:
    plain: list[float] = []
    checkpointed: list[float] = []
    stalls: list[float] = []
    writes: list[float] = []
    host_copies: list[float] = []
    sizes: list[int] = []
    for _round in range(ROUNDS):
        measured = tpu_nb.launch(train, STEPS, WARMUP, progress=False)
        plain.append(measured["steps_per_second"])
        host_copies.append(measured["host_copy_seconds"])
        with tempfile.TemporaryDirectory() as directory:
            measured = tpu_nb.launch(
                train, STEPS, WARMUP, progress=False, checkpoint=str(Path(directory) / "run"), every=f"{EVERY}steps", keep=2
            )
            checkpointed.append(measured["steps_per_second"])
            records = [found.record for found in list_checkpoints(str(Path(directory) / "run")) if found.record is not None]
        # Only the two newest are kept; each record of a kept one says how its save went.
        stalls += [record.stall_seconds for record in records]
        writes += [record.seconds for record in records]
        sizes += [record.size for record in records]
    plain_rate, checkpointed_rate = statistics.median(plain), statistics.median(checkpointed)
    saves = STEPS // EVERY + 1
    print(f"checkpoint overhead: {STEPS} steps, a save every {EVERY} steps ({saves} saves), {ROUNDS} rounds, XLA:CPU")
    print(f"  checkpoint size            {statistics.median(sizes) / 1e6:8.1f} MB")
    print(f"  plain                      {plain_rate:8.2f} steps/s  (rounds: {', '.join(f'{rate:.2f}' for rate in plain)})")
    print(f"  checkpointed               {checkpointed_rate:8.2f} steps/s  (rounds: {', '.join(f'{rate:.2f}' for rate in checkpointed)})")
    print(f"  throughput ratio           {checkpointed_rate / plain_rate:8.3f}")
    stall, write, copy = statistics.median(stalls), statistics.median(writes), statistics.median(host_copies)
    print(f"  step waited per save       {stall:8.3f} s  (median of {len(stalls)} saves)")
    print(f"  host copy of the state     {copy:8.3f} s  (timed by hand in the worker)")
    print(f"  write + read back + check  {write:8.3f} s  (in the background)")
    print(f"  stall / host copy          {stall / copy:8.2f}   (target: about 1: the loop waits for the copy only)")
    print(f"  stall / background work    {stall / write:8.2f}")


def memory() -> None:
    print("host memory of a save (a fresh worker each; its resident set sampled every millisecond while the step saves):")
    for layers, width, what in ((3, WIDTH, "the MLP above"), (12, 1024, "12 layers of 1024")):
        with tempfile.TemporaryDirectory() as directory:
            saves = tpu_nb.launch(
                save_memory, EVERY, layers, width, progress=False, checkpoint=str(Path(directory) / "run"), every=f"{EVERY}steps"
            )
        largest = width * width * 4 / saves[0]["state"]
        print(f"  {what}: state {saves[0]['state'] / 1e6:.1f} MB, its largest tensor {largest:.1%} of it")
        for which, save in zip(("first save", "second save"), saves, strict=True):
            added = save["peak"] - save["before"]
            print(
                f"    {which:<12} held before {save['before'] / 1e6:7.1f} MB, peak {save['peak'] / 1e6:7.1f} MB: "
                f"+{added / 1e6:.1f} MB, {added / save['state']:.3f} times the state (target <= 1.10)"
            )


if __name__ == "__main__":
    main()
