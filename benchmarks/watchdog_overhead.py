"""Does the watchdog cost training throughput? `tpu_nb.launch` of one loop with the watchdog on (the default) and off.

The loop (a small MLP, xm.optimizer_step, report() every step) measures its
own steps/s after warm-up. The watchdog reads, once a second on the
heartbeat thread, what the heartbeat reads anyway, plus two counters; a
step only adds one dict update in report(). Variants alternate, ROUNDS
times each; medians are compared. Target: on/off >= 0.99.
"""

from __future__ import annotations

import statistics
import time

import tpu_nb

STEPS, WARMUP, ROUNDS = 600, 50, 5


def train() -> float:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(64, 256).to(device), torch.randint(0, 10, (64,)).to(device)
    started = 0.0
    for step in range(1, STEPS + 1):
        if step == WARMUP:
            started = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        tpu_nb.report(step=step, loss=loss)
    xm.wait_device_ops()
    return (STEPS - WARMUP) / (time.perf_counter() - started)


def main() -> None:
    rates: dict[str, list[float]] = {"on": [], "off": []}
    for _round in range(ROUNDS):
        for variant in rates:
            watchdog = None if variant == "on" else "off"
            rates[variant].append(tpu_nb.launch(train, progress=False, watchdog=watchdog))
    for variant, values in rates.items():
        print(f"watchdog {variant:>3}: median {statistics.median(values):7.1f} steps/s  (min {min(values):.1f}, max {max(values):.1f})")
    ratio = statistics.median(rates["on"]) / statistics.median(rates["off"])
    print(f"on/off steps/s ratio: {ratio:.3f} (target >= 0.99)")


if __name__ == "__main__":
    main()
