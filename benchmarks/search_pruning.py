"""A search of 16 trials with Optuna's median pruner against the same 16 trials unpruned, and against a grid of 16.

On XLA:CPU with CPU_NUM_DEVICES=4: four devices stand for a host's four
chips, a trial on each, the next one started as a chip frees. Every trial
trains a small MLP with SGD for STEPS steps on a fixed classification task
(a teacher network's labels) and reports its loss each step and eval_loss
on held-out data every EVAL_EVERY steps; each step also waits STEP_WAIT
seconds with the host idle, as a TPU step does while the chip computes.
- pruned: `tpu_nb.launch(fn, trials=study, n_trials=16, space=space)` on a
  study with `MedianPruner(n_startup_trials=4, n_warmup_steps=10)`, its 16
  configurations (lr log-uniform in [1e-3, 1], momentum in [0, 0.95], drawn
  once with a fixed seed) enqueued in order;
- unpruned: the same 16 configurations on a study with no pruner;
- grid: `trials="lr=... momentum=..."`, 4 x 4 values over the same ranges.
Printed side by side, from one run of each after a warm-up: wall time, CPU
time (the kernel's and its runs'), the steps trained in all (each trial's
last step), and the best eval_loss a finished trial reached. What it means
on a TPU host: docs/concepts/measurements.md.
"""

from __future__ import annotations

import os
import random
import resource
import time
from typing import Any

import tpu_nb

STEPS = 60
EVAL_EVERY = 5
STEP_WAIT = 0.5
TRIALS = 16
GRID = "lr=0.001,0.01,0.1,1.0 momentum=0.0,0.5,0.9,0.95"


def train(trial: dict[str, Any]) -> float:
    import torch
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    teacher = torch.nn.Linear(64, 8)
    inputs = torch.randn(512, 64, generator=generator)
    with torch.no_grad():
        labels = teacher(inputs).argmax(dim=1)
    train_x, train_y = inputs[:384].to(device), labels[:384].to(device)
    eval_x, eval_y = inputs[384:].to(device), labels[384:].to(device)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=trial["lr"], momentum=trial["momentum"])
    eval_loss = None
    for step in range(STEPS):
        loss = torch.nn.functional.cross_entropy(model(train_x), train_y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        evaluation = {}
        if step % EVAL_EVERY == EVAL_EVERY - 1:
            with torch.no_grad():
                eval_loss = torch.nn.functional.cross_entropy(model(eval_x), eval_y)
            evaluation = {"eval_loss": eval_loss}
        torch_xla.sync()
        time.sleep(STEP_WAIT)
        tpu_nb.report(step=step, loss=loss, max_steps=STEPS, **evaluation)
    return float("nan") if eval_loss is None else float(eval_loss)


def space(trial: Any) -> dict[str, float]:
    return {"lr": trial.suggest_float("lr", 1e-3, 1.0, log=True), "momentum": trial.suggest_float("momentum", 0.0, 0.95)}


def configurations() -> list[dict[str, float]]:
    """The 16 configurations both searches run, drawn once."""
    draw = random.Random(0)
    return [{"lr": 10 ** draw.uniform(-3, 0), "momentum": draw.uniform(0.0, 0.95)} for _ in range(TRIALS)]


def steps_trained(result: Any) -> int:
    """Each trial's last step (+1), added up: what the chips spent."""
    return sum(1 + max((row["step"] for row in outcome.metrics if row.get("step") is not None), default=-1) for outcome in result.trials)


def best_eval_loss(result: Any) -> str:
    """The best finished trial's eval_loss, and its values."""
    best = result.best
    return "none" if best is None else f"{best.final['eval_loss']:.4f} ({best.trial.label})"


def cpu_seconds() -> float:
    """CPU time of this process (the kernel's side) and of the runs it reaped (each trial's supervisor and workers)."""
    own, runs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + runs.ru_utime + runs.ru_stime


def timed(**options: Any) -> tuple[float, float, Any]:
    """Wall time, CPU time and result of `tpu_nb.launch(train, ...)` with `options`."""
    started, cpu = time.monotonic(), cpu_seconds()
    result = tpu_nb.launch(train, trials_metric="eval_loss", progress=False, **options)
    return time.monotonic() - started, cpu_seconds() - cpu, result


def searched(pruner: Any) -> tuple[float, float, Any]:
    import optuna

    study = optuna.create_study(pruner=pruner)
    for values in configurations():
        study.enqueue_trial(values)
    return timed(trials=study, n_trials=TRIALS, space=space)


def main() -> None:
    import optuna

    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ["CPU_NUM_DEVICES"] = "4"  # read when each launch detects the runtime
    os.environ.setdefault("TPU_NB_RUN_LOG", "off")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tpu_nb.launch(train, {"lr": 0.1, "momentum": 0.9}, cores=1, progress=False)  # warm-up
    runs = {
        "pruned (median)": searched(optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=10)),
        "unpruned": searched(optuna.pruners.NopPruner()),
    }
    runs["grid 4x4"] = timed(trials=GRID)
    unpruned_seconds, _, unpruned = runs["unpruned"]
    print(f"{TRIALS} trials of {STEPS} steps ({STEP_WAIT} s of device wait each), {os.cpu_count()} CPU cores, 4 XLA:CPU devices")
    for name, (seconds, cpu, result) in runs.items():
        statuses = [outcome.status for outcome in result.trials]
        print(
            f"{name:<16} {seconds:6.1f} s ({unpruned_seconds / seconds:4.2f}x), CPU {cpu:5.1f} s   steps trained {steps_trained(result):5d} "
            f"({steps_trained(result) / steps_trained(unpruned):4.2f})   {statuses.count('pruned'):2d} pruned, "
            f"{statuses.count('done'):2d} done   best eval_loss {best_eval_loss(result)}"
        )


if __name__ == "__main__":
    main()
