"""Does the watchdog cost training throughput? `tpu_nb.launch` of one loop with the watchdog on (the default) and off.

The loop (a small MLP, xm.optimizer_step, a sync and report() every step)
measures its own steps/s after warm-up. The watchdog runs once a second on
the heartbeat thread and reads what the heartbeat reads anyway plus two
counters; a step only adds one dict update in report(). Variants alternate,
ROUNDS times each; medians are compared. Steps/s move by several percent
between runs on this 2-core machine, so the worker also times the
watchdog's own work (every call of the heartbeat's watchdog check), which
noise does not move: per step, against a 100 ms TPU step.
Target: on/off >= 0.99.
"""

from __future__ import annotations

import statistics
import time

import tpu_nb

STEPS, WARMUP, ROUNDS = 3000, 100, 5


def train() -> tuple[float, float]:
    """Steps/s after warm-up, and the seconds the watchdog's checks took over the run."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    from tpu_nb.workers.cell_api import reporting

    reporter = reporting.current()
    assert reporter is not None
    spent = [0.0]
    check = reporter._watch

    def timed_check(compiles: int) -> list:  # type: ignore[type-arg]
        started = time.perf_counter()
        try:
            return check(compiles)
        finally:
            spent[0] += time.perf_counter() - started

    reporter._watch = timed_check  # type: ignore[method-assign]  # this worker is a throwaway fork
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
        torch_xla.sync()  # one graph per step, as MpDeviceLoader cuts it
        tpu_nb.report(step=step, loss=loss)
    xm.wait_device_ops()
    return (STEPS - WARMUP) / (time.perf_counter() - started), spent[0]


def main() -> None:
    rates: dict[str, list[float]] = {"on": [], "off": []}
    watch_seconds: list[float] = []
    for _round in range(ROUNDS):
        for variant in rates:
            rate, spent = tpu_nb.launch(train, progress=False, watchdog=None if variant == "on" else "off")
            rates[variant].append(rate)
            if variant == "on":
                watch_seconds.append(spent)
    for variant, values in rates.items():
        print(f"watchdog {variant:>3}: median {statistics.median(values):7.1f} steps/s  (min {min(values):.1f}, max {max(values):.1f})")
    ratio = statistics.median(rates["on"]) / statistics.median(rates["off"])
    per_step = statistics.median(watch_seconds) / STEPS
    print(f"on/off steps/s ratio: {ratio:.3f} (target >= 0.99)")
    print(
        f"the watchdog's own checks: {statistics.median(watch_seconds) * 1e3:.2f} ms per run of {STEPS} steps, {per_step * 1e6:.2f} us per step"
    )
    print(f"  = {per_step / 0.1:.5%} of a 100 ms TPU step")


if __name__ == "__main__":
    main()
