"""Four trials side by side (`trials=`, a world of one device each) against the same four one after another.

On XLA:CPU with CPU_NUM_DEVICES=4: four devices stand for a host's four
chips. Two workloads, each a small MLP's training loop of STEPS steps:
- "host-bound": every step computes on XLA:CPU, so the trials share this
  machine's cores (2 here): side by side gains at most the cores' count;
- "device-bound": every step also waits STEP_WAIT seconds with the host idle,
  as a TPU step does while the chip computes: side by side, the waits overlap.
Sequential: `tpu_nb.launch(fn, trial, cores=1)` four times. Side by side:
`tpu_nb.launch(fn, trials=[...])`. Each is run once per workload after one
warm-up run (the kernel's imports and the warm imports are then in place, as
in a notebook after its first cell); the ratio is sequential / side by side.
What it should be on a TPU host is reasoned in docs/concepts/measurements.md.
"""

from __future__ import annotations

import os
import time
from typing import Any

import tpu_nb

STEPS = 30
STEP_WAIT = 0.2
TRIALS = [{"lr": lr, "wait": 0.0} for lr in (0.01, 0.03, 0.1, 0.3)]


def train(trial: dict[str, Any]) -> float:
    import torch
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=trial["lr"])
    data = torch.randn(128, 256, generator=torch.Generator().manual_seed(1)).to(device)
    target = torch.randint(0, 10, (128,), generator=torch.Generator().manual_seed(2)).to(device)
    for step in range(STEPS):
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        time.sleep(trial["wait"])
        tpu_nb.report(step=step, loss=loss, max_steps=STEPS)
    return float(loss.detach())


def measure(trials: list[dict[str, Any]]) -> tuple[float, float]:
    started = time.monotonic()
    alone = [tpu_nb.launch(train, trial, cores=1, progress=False) for trial in trials]
    sequential = time.monotonic() - started
    started = time.monotonic()
    together = tpu_nb.launch(train, trials=trials, progress=False).values
    side_by_side = time.monotonic() - started
    assert together == alone, (together, alone)  # the same trainings, so the same losses
    return sequential, side_by_side


def main() -> None:
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ["CPU_NUM_DEVICES"] = "4"  # read when each launch detects the runtime
    os.environ.setdefault("TPU_NB_RUN_LOG", "off")
    tpu_nb.launch(train, TRIALS[0], cores=1, progress=False)  # warm-up
    print(f"{len(TRIALS)} trials of {STEPS} steps, {os.cpu_count()} CPU cores, {len(TRIALS)} XLA:CPU devices")
    for name, wait in (("host-bound", 0.0), ("device-bound", STEP_WAIT)):
        sequential, side_by_side = measure([{**trial, "wait": wait} for trial in TRIALS])
        print(
            f"{name:<13} one after another {sequential:6.1f} s   side by side {side_by_side:6.1f} s   ratio {sequential / side_by_side:4.2f}x"
        )


if __name__ == "__main__":
    main()
