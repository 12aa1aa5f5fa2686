"""The kernel's memory for a sweep's `--return-best model` (5 folds) against one run's `--return model`, measured.

    PJRT_DEVICE=CPU python benchmarks/sweep_return_memory.py

Each case runs in a fresh Python process holding an IPython shell with
tpu_nb loaded, as a notebook's kernel: it builds a model of MODEL_LAYERS
linear layers (about 270 MB in f32), runs the same cell on a small model
first (the first run's costs, and the modules the kernel imports between
cells, are then behind it), then the measured cell. The kernel's
peak resident memory during that cell is read from /proc/self/status
(VmHWM, reset to the resident memory just before the cell through
/proc/self/clear_refs), and what it still holds after it (VmRSS, the cell's
value in `Out` as in a notebook). Both are given in MB and in copies of the
model. Trials are 5 folds on 4 XLA:CPU devices; each fold changes its
model's weights and reports a loss, and they end in order, each better than
the ones before: for `--return-best` the worst case, every fold's weights
loaded in turn as the best so far.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")

MODEL_LAYERS = 8
WIDTH = 2048
DEVICES = 4
CASES = {
    "one run, --return model": "--cores 1 --return {model}",
    "5 folds, --return-best model": "--trials folds={folds} --trials-metric loss --return-best {model}",
    "5 folds, --return model": "--trials folds={folds} --trials-metric loss --return {model}",
}
CELL = """%%tpu_train --no-progress --run-log off {options}
import time, torch
fold = trial["fold"] if "trial" in globals() else 0
time.sleep(fold)  # the folds end in order, each better than the last
with torch.no_grad():
    {model}[0].weight.add_(fold)
report(step=0, loss=5 - fold)
"""


def status(field: str) -> int:
    """A /proc/self/status figure, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def measure(case: str) -> dict[str, float]:
    """In this process: the model, the same cell first on a small model (its first-run costs), then the case's cell."""
    import torch
    from IPython.core.interactiveshell import InteractiveShell

    from tpu_nb.kernel.run import warm_imports
    from tpu_nb.wire import results

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tpu_nb")
    torch.manual_seed(0)
    shell.user_ns["small"] = torch.nn.Sequential(torch.nn.Linear(4, 4))
    shell.user_ns["model"] = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, 2 * WIDTH) for _ in range(MODEL_LAYERS)))
    model_bytes = sum(tensor.numel() * tensor.element_size() for tensor in shell.user_ns["model"].state_dict().values())
    warm_up = CELL.format(options=CASES[case].format(folds=2, model="small"), model="small")
    assert shell.run_cell(warm_up, store_history=True).success
    warm_imports.wait()  # the modules the kernel imports between cells for the next run's start: not the measured cell's
    loads = []  # the weights files the kernel loads in the measured cell (as results load them)
    real_load = results.load_weights

    def counted_load(path: Path) -> Any:
        loads.append(path)
        return real_load(path)

    results.load_weights = counted_load
    gc.collect()
    before = status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from the resident memory now
    assert status("VmHWM") <= before + (16 << 20), "the peak could not be reset"
    cell = shell.run_cell(CELL.format(options=CASES[case].format(folds=5, model="model"), model="model"), store_history=True)
    assert cell.success, cell.error_in_exec
    peak = status("VmHWM")
    warm_imports.wait()
    gc.collect()
    held = status("VmRSS")
    return {"model": model_bytes, "peak": peak - before, "held": held - before, "loads": len(loads)}


def main() -> None:
    figures = {}
    for case in CASES:
        done = subprocess.run(
            [sys.executable, __file__, case],
            env={**os.environ, "CPU_NUM_DEVICES": str(DEVICES)},
            capture_output=True,
            text=True,
            check=True,
        )
        figures[case] = json.loads(done.stdout.splitlines()[-1])
    model = next(iter(figures.values()))["model"]
    print(
        f"model: {model / 1e6:.1f} MB (f32); sweeps: 5 folds on {DEVICES} XLA:CPU devices; the kernel's memory above its own before the cell"
    )
    for case, figure in figures.items():
        print(
            f"{case + ':':<32} peak +{figure['peak'] / 1e6:7.1f} MB ({figure['peak'] / model:.2f} models), "
            f"held after +{figure['held'] / 1e6:7.1f} MB ({figure['held'] / model:.2f} models), {figure['loads']} weights loaded"
        )
    best, one = figures["5 folds, --return-best model"], figures["one run, --return model"]
    print(f"ratio of peaks, --return-best over 5 folds / one run's --return: {best['peak'] / one['peak']:.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(measure(sys.argv[1])))
    else:
        main()
