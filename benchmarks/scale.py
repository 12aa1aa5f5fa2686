"""What a model's size costs a run, side by side with a raw process doing the same work without tpu_nb.

    PJRT_DEVICE=CPU python benchmarks/scale.py                      # the whole table (issue #50's "Size")
    PJRT_DEVICE=CPU python benchmarks/scale.py --sizes 0.1 --dtypes fp32 --worlds 1

Models: transformers' LlamaForCausalLM built from a config in the process that starts the run (the
notebook), of about 0.1, 0.5 and 1 B parameters (the 0.1 and 0.5 B ones tie their embeddings to the
output layer, as Llama 3.2 1B does; the 1 B one is TinyLlama-1.1B's shape), in fp32 or bf16. Each case
runs in a fresh process of its own, one at a time; it first runs once on a tiny model of the same family
(first-run costs behind it), then is measured:
- raw: the notebook process imports torch_xla and calls `xmp.spawn(fn, start_method="fork")`; fn moves
  the model to the XLA device, takes 2 SGD steps, saves a checkpoint with `xm.save(model.state_dict(),
  path)`, and rank 0 sends the trained state back as a raw notebook must (xmp.spawn returns nothing): its
  `.cpu()` copies `torch.save`d to /dev/shm, which the notebook `torch.load`s into its model.
- tpu_nb: an IPython shell with tpu_nb loaded (a notebook's kernel without Jupyter's sockets) runs the same
  steps in `%%tpu_train --return model --checkpoint DIR --every 2steps`, the loop's state named with
  `tpu_nb.checkpoint.track(model=, optimizer=)`.
Both re-tie the embedding after the move, as transformers' Trainer does on XLA (`model.to(device)` unties it).
A process per device (`--worlds 4`) is what torch_xla runs on a TPU host (v4 and later): there
tests/support/process_world.py makes xmp.spawn fork one process per XLA:CPU device from the notebook's
fork (a ProcessPoolExecutor with fork, as torch_xla's own launcher does on a TPU), in both variants. Its
gradient all-reduce (a host copy in float64 through gloo, where a TPU reduces on the device inside the
step's graph) is left out: every process takes its own 2 steps.

Figures: launch (the cell's start to rank 0's first line), steps (2 SGD steps, their compilations
included; tpu_nb's after its `track`; also in rank 0's CPU seconds), track (tpu_nb's checksums of the
starting weights, which a later checkpoint is told apart from), checkpoint (what the loop waits for:
raw's whole `xm.save`, tpu_nb's copy to host memory; then tpu_nb's write, read back and check in the
background; the bytes on disk over the state's), return (from the end of rank 0's code, its checkpoint
done, to the notebook's model holding the trained weights; also in CPU seconds of the processes on its
path, robust to other work on the machine), and the host memory of the whole process tree above what the
notebook process held before the cell: its peak, its peak during the return and what that added to what
the tree held as the return started (rank 0's code and its checkpoint done), in GB and in copies of the
weights (W). With each case, the cores the whole machine kept busy meanwhile (2 here: the case's own
work and any other).

Memory is the tree's PSS, sampled: over the notebook process and every descendant (tpu_nb's supervisor,
the workers), /proc/PID/smaps_rollup's Pss_Anon, plus the bytes of the run's files in /dev/shm. Forked
workers share the notebook's pages copy-on-write: RSS (and VmHWM) counts a shared page in every process
mapping it, so summed it would count the notebook's weights once per process (six times with four
workers, the supervisor and the kernel) and add peaks that did not happen together. PSS splits each page
among the processes that map it, so the sum counts a page once: weights the workers only share count
once, weights a worker copied (or dirtied) count again. Anonymous memory only: file-backed pages
(libraries, shared with every other Python process on the machine, so their PSS moves when other work
starts) are page cache the system can drop; files in /dev/shm are memory no process's anonymous PSS holds,
so they count by their size, mapped or not. Reading smaps_rollup walks a process's pages (about 16 ms per
GB here), so the sampler waits 3 times as long as a sample took between samples (at least 20 ms): a
shorter peak can be missed; the median sample's time is printed.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")

TESTS = Path(__file__).resolve().parents[1] / "tests"


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    tied: bool


SHAPES = {
    "0.1": Shape(768, 2048, 12, 12, True),  # 0.100 B
    "0.5": Shape(1536, 4096, 18, 16, True),  # 0.495 B
    "1": Shape(2048, 5632, 22, 32, False),  # 1.100 B (TinyLlama-1.1B)
    "tiny": Shape(64, 128, 2, 4, True),  # 2.1 M: what each case runs first, and a quick look at the script
}
VOCAB, KV_HEADS = 32000, 4
BATCH, SEQUENCE = 2, 32
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
SETTLE = 1.0  # seconds the notebook waits before the cell, while its memory is sampled
MARGIN = 4 << 30  # bytes of memory a case leaves to the rest of the machine (a shared one), or it is not run
CASE_TIMEOUT = 3600  # seconds a case may take (a 1 B model's 4 processes compile on 2 cores) before it is ended


# In the case's own process: the model, the marks.


def llama_config(shape: Shape) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=KV_HEADS,
        vocab_size=VOCAB,
        tie_word_embeddings=shape.tied,
        max_position_embeddings=256,
    )


def build_model(shape: Shape, dtype: str) -> Any:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, DTYPES[dtype]))  # built in its dtype: no float32 copy first
    try:
        return LlamaForCausalLM(llama_config(shape))
    finally:
        torch.set_default_dtype(default)


def weight_bytes(model: Any) -> int:
    """The bytes of the model's weights, each tensor once (tied ones are one)."""
    storages = {tensor.untyped_storage().data_ptr(): tensor.untyped_storage().nbytes() for tensor in model.state_dict().values()}
    return sum(storages.values())


def mark(name: str, rank: int = -1) -> None:
    """Note when something happened, and the marking process's CPU time, in any process of the case (SCALE_MARKS
    names the file; rank -1: the notebook, -2: tpu_nb's return path, wherever it runs)."""
    with open(os.environ["SCALE_MARKS"], "a") as marks:
        marks.write(f"{name} {rank} {time.monotonic()} {time.process_time()}\n")


def settle(prefix: str = "") -> None:
    """Let the notebook's memory settle, and be sampled, before a cell (`prefix`: which one)."""
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    mark(f"{prefix}ready")
    time.sleep(SETTLE)


def take_steps(model: Any, device: Any, rank: int, optimizer_made: Any) -> Any:
    """Rank's part of both variants up to the checkpoint: the move, the optimizer (`optimizer_made`), 2 SGD steps,
    each yielded with its loss."""
    import torch
    import torch_xla

    model.to(device)
    model.tie_weights()  # what the move untied, as transformers' Trainer does on XLA
    torch_xla.sync()
    mark("on_device", rank)
    optimizer = optimizer_made(model)
    batch = torch.randint(0, VOCAB, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(rank)).to(device)
    for step in (1, 2):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        if step == 2:
            mark("stepped", rank)
        yield step, loss


def raw_worker(index: int, model: Any, checkpoint: str, returned: str) -> None:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    rank = xr.global_ordinal()
    mark("first_line", rank)
    for _step, _loss in take_steps(model, torch_xla.device(), rank, lambda model: torch.optim.SGD(model.parameters(), lr=1e-3)):
        pass
    xm.save(model.state_dict(), checkpoint)  # rank 0 writes (the others wait for it)
    mark("saved", rank)
    if rank == 0:
        torch.save({key: tensor.cpu() for key, tensor in model.state_dict().items()}, returned)
        mark("sent", rank)


def process_world(world: int) -> None:
    """From now on, xmp.spawn forks a process per device (`world` of them), as on a TPU host."""
    if world > 1:
        sys.path.insert(0, str(TESTS))
        from support.process_world import install

        install()


def run_raw(size: str, dtype: str, world: int, directory: Path) -> dict[str, Any]:
    import torch
    import torch_xla.distributed.xla_multiprocessing as xmp

    process_world(world)
    shm = Path(tempfile.mkdtemp(prefix=f"scale-{os.getpid()}-", dir="/dev/shm"))
    model = build_model(SHAPES[size], dtype)

    def cell(model: Any, checkpoint: Path) -> None:
        returned = shm / "state.pt"
        # From a thread of its own: forked from a thread that has run one of torch's parallel CPU ops (loading the tiny
        # model's state did), a worker waits forever in its own first one (GNU OpenMP's pool: workers/supervisor.py).
        spawning = threading.Thread(
            target=xmp.spawn, args=(raw_worker,), kwargs={"args": (model, str(checkpoint), str(returned)), "start_method": "fork"}
        )
        spawning.start()
        spawning.join()
        mark("joined")
        state = torch.load(returned, weights_only=True)
        model.load_state_dict(state)
        del state
        returned.unlink()

    tiny = build_model(SHAPES["tiny"], dtype)
    try:
        settle("tiny_")
        mark("tiny_cell")
        cell(tiny, directory / "tiny.pt")
        mark("tiny_back")
        settle()
        mark("cell")
        cell(model, directory / "checkpoint.pt")
        mark("back")
    finally:
        shutil.rmtree(shm, ignore_errors=True)  # a worker that died (the OOM killer) left its state there
    return {"weights": weight_bytes(model), "checkpoint_bytes": (directory / "checkpoint.pt").stat().st_size}


CELL = """%%tpu_train --no-progress --run-log off --cores {world} --return {model} --checkpoint {checkpoint} --every 2steps
import torch, tpu_nb
from tpu_nb.workers.cell_api import reporting
mark("first_line", rank)
def tracked(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    tpu_nb.checkpoint.track(model=model, optimizer=optimizer)
    mark("tracked", rank)
    return optimizer
for step, loss in take_steps({model}, device, rank, tracked):
    report(step=step, loss=loss)  # the second saves the checkpoint: the loop waits for the copy to host memory
mark("saved", rank)
reporting.current().checkpointer.wait()
mark("checked", rank)
"""


def timed(module: Any, name: str, label: str) -> None:
    """Mark the start and the end of `module.name` (a step of the return's path), in whichever process calls it."""
    original = getattr(module, name)

    def marked(*args: Any, **kwargs: Any) -> Any:
        mark(f"{label}>", -2)
        try:
            return original(*args, **kwargs)
        finally:
            mark(f"{label}<", -2)

    setattr(module, name, marked)


def run_tpu_nb(size: str, dtype: str, world: int, directory: Path) -> dict[str, Any]:
    from IPython.core.interactiveshell import InteractiveShell

    import tpu_nb.kernel.endings.run_ending as run_ending
    import tpu_nb.kernel.notebook.returns as returns
    import tpu_nb.workers.processes.worker as worker
    from tpu_nb.kernel.run import warm_imports
    from tpu_nb.wire.checkpoints import list_checkpoints

    process_world(world)
    timed(worker, "save_result", "write")  # the worker: its weights copied to the host and written
    timed(run_ending, "load_result", "load")  # the kernel: the results loaded
    timed(returns, "apply_returns", "apply")  # the kernel: the weights loaded into the notebook's module
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tpu_nb")
    shell.user_ns.update(mark=mark, take_steps=take_steps, tiny=build_model(SHAPES["tiny"], dtype), model=build_model(SHAPES[size], dtype))

    def cell(model: str, checkpoint: Path) -> None:
        done = shell.run_cell(CELL.format(world=world, model=model, checkpoint=checkpoint), store_history=True)
        assert done.success, done.error_in_exec

    settle("tiny_")
    mark("tiny_cell")
    cell("tiny", directory / "tiny")
    mark("tiny_back")
    warm_imports.wait()
    settle()
    mark("cell")
    cell("model", directory / "run")
    mark("back")
    records = [found.record for found in list_checkpoints(str(directory / "run")) if found.record is not None]
    assert len(records) == 1 and records[0].verified, records
    record = records[0]
    return {
        "weights": weight_bytes(shell.user_ns["model"]),
        "checkpoint_bytes": record.size,
        "background": record.seconds - record.stall_seconds,
    }


# The driver: each case in a process of its own, its tree's memory sampled from here.


Sample = tuple[float, int, dict[int, int]]  # (time, the run's /dev/shm bytes, pid -> anonymous PSS bytes)


class TreeMemory:
    """The memory of a process and its descendants, sampled in a thread (see the module's docstring)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.samples: list[Sample] = []
        self.sample_seconds: list[float] = []
        self.cpu_ticks: list[tuple[float, int]] = []  # (time, the machine's busy CPU ticks since boot)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exception: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            pss = {pid: found for pid in self._tree() if (found := _anonymous_pss(pid)) is not None}
            if pss:
                self.samples.append((started, _shm_bytes(self.root), pss))
            self.cpu_ticks.append((started, _busy_ticks()))
            took = time.monotonic() - started
            self.sample_seconds.append(took)
            if self._stop.wait(max(0.02, 3 * took)):
                return

    def _tree(self) -> list[int]:
        pids, found = [self.root], 0
        while found < len(pids):
            pid = pids[found]
            found += 1
            try:
                for task in Path(f"/proc/{pid}/task").iterdir():
                    pids += [int(child) for child in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
        return pids

    @staticmethod
    def total(sample: Sample) -> int:
        return sample[1] + sum(sample[2].values())

    def between(self, start: float, end: float) -> list[Sample]:
        """The samples taken from `start` to `end`, or the first one after `start` if none was (a short phase)."""
        taken = [sample for sample in self.samples if start <= sample[0] <= end]
        return taken or [next(sample for sample in self.samples if sample[0] >= start)]

    def last(self, end: float) -> Sample:
        """The last sample taken by `end`."""
        return max((sample for sample in self.samples if sample[0] <= end), key=lambda sample: sample[0])

    def level(self, start: float, end: float) -> float:
        """The tree's memory from `start` to `end` (the median sample; the last one before `end` if none was taken)."""
        taken = [self.total(sample) for sample in self.samples if start <= sample[0] <= end]
        return statistics.median(taken) if taken else self.total(self.last(end))

    def busy(self, start: float, end: float) -> float:
        """How many of the machine's cores were busy on average from `start` to `end` (this case's work and all other)."""
        taken = [(at, ticks) for at, ticks in self.cpu_ticks if start <= at <= end]
        if len(taken) < 2:
            return float("nan")
        return (taken[-1][1] - taken[0][1]) / os.sysconf("SC_CLK_TCK") / (taken[-1][0] - taken[0][0])


def _anonymous_pss(pid: int) -> int | None:
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return int(fields["Pss_Anon"].split()[0]) * 1024


def _busy_ticks() -> int:
    """The machine's CPU ticks spent busy since boot (all but idle and iowait), from /proc/stat."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(field) for field in Path("/proc/stat").read_text().split()[1:9])
    return user + nice + system + irq + softirq + steal


def _shm_bytes(root: int) -> int:
    total = 0
    for directory in [*Path("/dev/shm").glob(f"tpu_nb-{root}-*"), *Path("/dev/shm").glob(f"scale-{root}-*")]:
        for file in directory.rglob("*"):
            try:
                total += file.lstat().st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def measure(variant: str, size: str, dtype: str, world: int) -> dict[str, Any]:
    """Run one case in a fresh process (this script, `--case`), sampling its tree's memory; its figures."""
    with tempfile.TemporaryDirectory(prefix="scale-", dir=os.environ.get("SCALE_CHECKPOINTS")) as directory:
        marks = Path(directory) / "marks"
        environment = {**os.environ, "SCALE_MARKS": str(marks), "CPU_NUM_DEVICES": str(world)}
        command = [sys.executable, __file__, "--case", variant, size, dtype, str(world), directory]
        with (
            subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, text=True, start_new_session=True) as process,
            TreeMemory(process.pid) as memory,
        ):
            try:
                output, _ = process.communicate(timeout=CASE_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the case and every process it started
                raise
        if process.returncode != 0:
            raise RuntimeError(f"{variant} {size} {dtype} x{world} failed ({process.returncode})")
        figures: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
        at: dict[tuple[str, int], float] = {}
        cpu: dict[tuple[str, int], float] = {}
        for line in marks.read_text().splitlines():  # the measured cell's marks come last (the tiny model's first)
            name, rank, when, used = line.split()
            at[name, int(rank)], cpu[name, int(rank)] = float(when), float(used)
    cell, back = at["cell", -1], at["back", -1]
    baseline = memory.level(at["ready", -1] + SETTLE / 2, cell)
    end = at["checked", 0] if variant == "tpu_nb" else at["saved", 0]
    peak = max(memory.between(cell, back), key=memory.total)
    tiny_peak = max(memory.total(sample) for sample in memory.between(at["tiny_cell", -1], at["tiny_back", -1]))
    started = at.get(("tracked", 0), at["on_device", 0])
    if variant == "tpu_nb":
        # The worker's copy and write of the weights, then the kernel's load and apply, to the cell's end.
        return_cpu = (cpu["write<", -2] - cpu["checked", 0]) + (cpu["back", -1] - cpu["load>", -2])
        figures.update(
            track=at["tracked", 0] - at["on_device", 0],
            phases={name: at[f"{name}<", -2] - at[f"{name}>", -2] for name in ("write", "load", "apply")},
            phases_cpu={name: cpu[f"{name}<", -2] - cpu[f"{name}>", -2] for name in ("write", "load", "apply")},
        )
    else:
        return_cpu = (cpu["sent", 0] - cpu["saved", 0]) + (cpu["back", -1] - cpu["joined", -1])
    figures.update(
        launch=at["first_line", 0] - cell,
        steps=at["stepped", 0] - started,
        steps_cpu=cpu["stepped", 0] - cpu[("tracked", 0) if variant == "tpu_nb" else ("on_device", 0)],
        stall=at["saved", 0] - at["stepped", 0],
        returned=back - end,
        return_cpu=return_cpu,
        peak=memory.total(peak) - baseline,
        # The same cell on the tiny model: what the run's processes take whatever the model (the XLA runtime, ...).
        fixed=tiny_peak - memory.level(at["tiny_ready", -1] + SETTLE / 2, at["tiny_cell", -1]),
        peak_return=max(memory.total(sample) for sample in memory.between(end, back)) - baseline,
        # What the return's peak added to what the tree held as it started (rank 0's code done, its checkpoint too).
        return_extra=max(memory.total(sample) for sample in memory.between(end, back)) - memory.total(memory.last(end)),
        peak_files=peak[1],  # of which the run's files in /dev/shm
        busy=memory.busy(cell, back),
        sample_seconds=statistics.median(memory.sample_seconds),
    )
    return figures


def needed_bytes(size: str, dtype: str, world: int) -> int:
    """What a case may take at its peak, from the peaks measured here (raw's, the larger): the notebook's weights and
    process, per process its device's weights and gradients and its runtime, and then either the steps' temporaries
    (in bf16 about a float32 copy: XLA:CPU computes in float32; 4 processes of a 0.1 B model peaked at 22.9 W, and one
    of 4 processes of a 0.5 B model held 2.7 W when the OOM killer ended it) or the return's and checkpoint's copies."""
    import torch
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        parameters = sum(parameter.numel() for parameter in LlamaForCausalLM(llama_config(SHAPES[size])).parameters())
    weights = parameters * (4 if dtype == "fp32" else 2)
    on_devices = world * (2 * weights + (300 << 20))
    temporaries = world * (0 if dtype == "fp32" else 4 * parameters)
    return int(weights + (1 << 30) + on_devices + max(temporaries, 2.5 * weights))


def available_bytes() -> int:
    line = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemAvailable:"))
    return int(line.split()[1]) * 1024


def gigabytes(count: float) -> str:
    return f"{count / 1e9:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="0.1,0.5,1", help="billions of parameters: 0.1, 0.5, 1 (or tiny)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help=", ".join(DTYPES))
    parser.add_argument("--worlds", default="1,4", help="processes: 1 (one worker) and 4 (a process per device)")
    options = parser.parse_args()
    cases = [
        (size, dtype, int(world))
        for world in options.worlds.split(",")
        for size in options.sizes.split(",")
        for dtype in options.dtypes.split(",")
    ]
    rows = []
    for size, dtype, world in cases:
        needed, available = needed_bytes(size, dtype, world), available_bytes()
        if needed + MARGIN > available:
            print(
                f"{size} B {dtype}, {world} process{'es' if world > 1 else ''}: not run: it needs about {gigabytes(needed)} GB, "
                f"{gigabytes(available)} GB are available and {gigabytes(MARGIN)} GB are left to the rest of the machine",
                flush=True,
            )
            continue
        raw = measure("raw", size, dtype, world)
        ours = measure("tpu_nb", size, dtype, world)
        rows.append((size, dtype, world, raw, ours))
        print(f"{size} B {dtype}, {world} process{'es' if world > 1 else ''}: raw {json.dumps(raw)}", flush=True)
        print(f"{'':>{len(size) + len(dtype) + 15}}tpu_nb {json.dumps(ours)}", flush=True)
    print()
    print_table(rows)


def print_table(rows: list[tuple[str, str, int, dict[str, Any], dict[str, Any]]]) -> None:
    """The table, raw / tpu_nb in each cell: seconds, and memory in GB and in copies of the weights (W)."""
    columns = (
        "model",
        "processes",
        "weights (W)",
        "launch (s)",
        "steps (s)",
        "steps (CPU s)",
        "checkpoint: the loop waits (s)",
        "tpu_nb's write and check (background, s)",
        "checkpoint on disk / state",
        "--return (s)",
        "--return (CPU s)",
        "tpu_nb's extra per GB (s, CPU s)",
        "peak memory above the notebook's, GB (W)",
        "of which the processes' own (the tiny model's peak), GB",
        "during the return, GB (W)",
        "of which above its start, GB (W)",
        "cores busy",
    )
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for size, dtype, world, raw, ours in rows:
        weights = raw["weights"]

        def both(key: str, raw: dict[str, Any] = raw, ours: dict[str, Any] = ours) -> str:
            return f"{raw[key]:.2f} / {ours[key]:.2f}"

        def memory(key: str, raw: dict[str, Any] = raw, ours: dict[str, Any] = ours, weights: int = weights) -> str:
            return f"{gigabytes(raw[key])} ({raw[key] / weights:.2f}) / {gigabytes(ours[key])} ({ours[key] / weights:.2f})"

        per_gigabyte = (ours["returned"] - raw["returned"]) / (weights / 1e9), (ours["return_cpu"] - raw["return_cpu"]) / (weights / 1e9)
        cells = (
            f"{size} B {dtype}",
            str(world),
            f"{gigabytes(weights)} GB",
            both("launch"),
            both("steps"),
            both("steps_cpu"),
            both("stall"),
            f"{ours['background']:.2f}",
            f"{raw['checkpoint_bytes'] / weights:.2f} / {ours['checkpoint_bytes'] / weights:.2f}",
            both("returned"),
            both("return_cpu"),
            f"{per_gigabyte[0]:+.2f}, {per_gigabyte[1]:+.2f}",
            memory("peak"),
            f"{gigabytes(raw['fixed'])} / {gigabytes(ours['fixed'])}",
            memory("peak_return"),
            memory("return_extra"),
            f"{raw['busy']:.1f} / {ours['busy']:.1f}",
        )
        print("| " + " | ".join(cells) + " |")
    print()
    for size, dtype, world, _raw, ours in rows:
        phases = ", ".join(f"{name} {seconds:.2f} s ({ours['phases_cpu'][name]:.2f} CPU s)" for name, seconds in ours["phases"].items())
        print(f"tpu_nb, {size} B {dtype}, {world}: track {ours['track']:.2f} s; the return's {phases}")


def run_case(variant: str, size: str, dtype: str, world: int, directory: str) -> None:
    run = run_raw if variant == "raw" else run_tpu_nb
    print(json.dumps(run(size, dtype, world, Path(directory))))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--case"]:
        run_case(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    else:
        main()
