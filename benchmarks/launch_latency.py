"""How long does a training cell take to start? Measured in real Jupyter kernels, one run at a time.

Latency = from the cell's start (IPython's pre_run_cell) to the first line of
the user's code on rank 0, and to its first XLA tensor read back (the XLA
runtime's client started in the worker). For tpu_nb the start is cut into
phases by timing two of its functions in the benchmark's kernel only: the
kernel's checks and dashboard until the fork, the supervisor until it
spawns the workers (importing torch_xla), the workers until the user's code. Variants, each run 6 times in one
kernel (the first run, then 5 following runs; a user pauses between cells,
so each run starts 5 s after the previous one ended):
- raw: `xmp.spawn(fn, start_method="fork")` in a notebook that imported torch_xla itself;
- tpu_nb (user imported torch_xla): `%%tpu_train` in that notebook;
- tpu_nb (no torch_xla import): `%%tpu_train` in a notebook that imports torch_xla
  only inside its training cells, as tpu_nb's tutorials do.
Target: tpu_nb's following runs start within raw + 0.5 s.
"""

from __future__ import annotations

import json
import os
import re
import statistics

import nbformat
from nbclient import NotebookClient

RUNS = 6
PAUSE_SECONDS = 5

CLOCK = """
import json, time, torch
import tpu_nb.kernel.run.processes as processes, tpu_nb.workers.processes.supervisor as supervisor
MARKS = {}
def _cell_started(*args):
    MARKS.clear()
    MARKS["cell"] = time.perf_counter()
get_ipython().events.register("pre_run_cell", _cell_started)

def _marking(name, function):
    def marked(*args, **kwargs):
        MARKS[name] = time.perf_counter()  # inherited by the forked processes
        return function(*args, **kwargs)
    return marked
processes.forking.fork = _marking("fork", processes.forking.fork)
supervisor.spawn_workers = _marking("spawn", supervisor.spawn_workers)

def first_lines(device, variant):
    now = time.perf_counter()
    torch.zeros(2, device=device).sum().item()  # the worker's XLA client is up
    marks = {name: at - MARKS["cell"] for name, at in MARKS.items()}
    figures = {"variant": variant, "first_line": now - MARKS["cell"], "first_tensor": time.perf_counter() - MARKS["cell"], **marks}
    print("LATENCY " + json.dumps(figures), flush=True)
"""

RAW = """
import torch_xla, torch_xla.distributed.xla_multiprocessing as xmp
def raw_worker(index):
    first_lines(torch_xla.device(), "raw")
xmp.spawn(raw_worker, start_method="fork")
"""

TPU_NB = """%%tpu_train
first_lines(device, VARIANT)
"""

PAUSE = f"time.sleep({PAUSE_SECONDS})"


def run_kernel(cells: list[str]) -> list[dict[str, float | str]]:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute(env=dict(os.environ, PJRT_DEVICE="CPU"))
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for match in re.finditer(r"LATENCY (\{.*\})", output.get("text", "")):
                found.append(json.loads(match.group(1)))
    return found


def summary(name: str, runs: list[dict[str, float | str]]) -> float:
    """Print the first run and the median and spread of the following ones; the median first-line latency of those."""
    first, following = runs[0], runs[1:]
    lines = [float(run["first_line"]) for run in following]
    tensors = [float(run["first_tensor"]) for run in following]
    print(
        f"{name:<34} first run: {first['first_line']:.2f} s to the first line ({first['first_tensor']:.2f} s to its first tensor) | "
        f"following {len(following)}: median {statistics.median(lines):.2f} s (min {min(lines):.2f}, max {max(lines):.2f}), "
        f"first tensor {statistics.median(tensors):.2f} s"
    )
    if "fork" in first:
        for label, runs_shown in (("first", [first]), ("following", following)):

            def median(key: str, shown: list[dict[str, float | str]] = runs_shown) -> float:
                return statistics.median(float(run[key]) for run in shown)

            print(
                f"{'':<34} {label}: checks and dashboard {median('fork') * 1000:.0f} ms, supervisor (torch_xla import) "
                f"{(median('spawn') - median('fork')) * 1000:.0f} ms, workers until the first line "
                f"{(median('first_line') - median('spawn')) * 1000:.0f} ms, XLA client until the first tensor "
                f"{(median('first_tensor') - median('first_line')) * 1000:.0f} ms"
            )
    return statistics.median(lines)


def main() -> None:
    imported = ["%load_ext tpu_nb", CLOCK, "import torch_xla"]
    for _ in range(RUNS):
        imported += [RAW, PAUSE, "VARIANT = 'tpu_nb, user imported torch_xla'", TPU_NB, PAUSE]
    not_imported = ["%load_ext tpu_nb", CLOCK, "VARIANT = 'tpu_nb, no torch_xla import'"]
    for _ in range(RUNS):
        not_imported += [TPU_NB, PAUSE]
    runs = run_kernel(imported) + run_kernel(not_imported)
    by_variant: dict[str, list[dict[str, float | str]]] = {}
    for run in runs:
        by_variant.setdefault(str(run["variant"]), []).append(run)
    print(f"launch latency, XLA:CPU, one worker; cell start -> rank 0's first line (median of {RUNS - 1} following runs)")
    raw = summary("raw xmp.spawn (torch_xla imported)", by_variant["raw"])
    with_import = summary("tpu_nb (torch_xla imported)", by_variant["tpu_nb, user imported torch_xla"])
    without_import = summary("tpu_nb (no torch_xla import)", by_variant["tpu_nb, no torch_xla import"])
    for name, median in (("with the user's import", with_import), ("without it", without_import)):
        verdict = "met" if median <= raw + 0.5 else "NOT met"
        print(f"tpu_nb {name}: {median:.2f} s vs raw {raw:.2f} s + 0.5 s: target {verdict} (difference {median - raw:+.2f} s)")


if __name__ == "__main__":
    main()
