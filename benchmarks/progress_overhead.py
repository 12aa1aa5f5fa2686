"""Does live progress cost training throughput? Measured in one real Jupyter kernel.

The same loop (a small BERT, MpDeviceLoader, xm.optimizer_step) runs
- raw: `xmp.spawn(fn, start_method="fork")`, no tpu_nb, no reporting;
- tpu_nb: `%%tpu_train` with `report(step=..., loss=loss, tokens=..., samples=...)`
  every step, its tokens counted on the device (`(input_ids != 0).sum()`,
  a lazy tensor), and the live widget dashboard with its speed line (the
  XLA doctor on, as by default, reading where each step's time goes);
- no_doctor: the same with `--no-doctor`.
Each worker measures its own steps/s after warm-up, its XLA compilations,
its device-to-host transfers (TransferFromDeviceTime samples) and CPU time:
the process's per step, and what noise does not move, tpu_nb's own per step
(the CPU time of its threads, the heartbeat with the doctor, read from
/proc, plus the time the training thread spends inside `report()`).
Variants alternate, ROUNDS times each; medians and spreads are compared.
Target: identical compile counts after warm-up, at most two extra transfers
per reporting interval (the loss and the token count, read together after
their step ran), throughput ratio >= 0.98, doctor on/off ratio >= 0.99,
tpu_nb's CPU time with throughput on under 1% of a 100 ms TPU step (1000 us).
"""

from __future__ import annotations

import json
import os
import re
import statistics

import nbformat
from nbclient import NotebookClient

STEPS, WARMUP = 200, 30
ROUNDS = 5

SETUP = f"""
import json, os, time, torch
from transformers import BertConfig, BertForSequenceClassification
STEPS, WARMUP = {STEPS}, {WARMUP}
ids = torch.randint(10, 200, (STEPS * 32, 32), generator=torch.Generator().manual_seed(0))
labels = (ids[:, 1] > 100).long()
torch.manual_seed(0)
config = BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=64, num_labels=2)
model = BertForSequenceClassification(config)

def tpu_nb_threads_cpu():
    # utime + stime of this process's tpu_nb threads (named tpu_nb-...), in seconds
    ticks = 0
    for task in os.listdir("/proc/self/task"):
        try:
            stat = open(f"/proc/self/task/{{task}}/stat").read()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name.startswith("tpu_nb"):
            ticks += int(rest[11]) + int(rest[12])
    return ticks / os.sysconf("SC_CLK_TCK")

def train_loop(device, on_step):  # on_step(step, loss, input_ids)
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
    in_report = 0.0
    for step, (input_ids, batch_labels) in enumerate(loader, start=1):
        if step == WARMUP:
            xm.wait_device_ops()
            started, compiles, transfers = time.perf_counter(), count("CompileTime"), count("TransferFromDeviceTime")
            cpu, thread_cpu, threads_cpu, in_report = time.process_time(), time.thread_time(), tpu_nb_threads_cpu(), 0.0
        loss = model(input_ids=input_ids, labels=batch_labels).loss
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        before = time.thread_time()
        on_step(step, loss, input_ids)
        in_report += time.thread_time() - before
    xm.wait_device_ops()
    seconds, steps = time.perf_counter() - started, STEPS - WARMUP
    return {{"steps_per_s": steps / seconds, "seconds": seconds,
             "compiles_after_warmup": count("CompileTime") - compiles,
             "compiles_total": count("CompileTime"),
             "transfers_after_warmup": count("TransferFromDeviceTime") - transfers,
             "cpu_us_per_step": (time.process_time() - cpu) / steps * 1e6,
             "training_thread_us_per_step": (time.thread_time() - thread_cpu) / steps * 1e6,
             "own_cpu_us_per_step": (tpu_nb_threads_cpu() - threads_cpu + in_report) / steps * 1e6}}
"""

RAW = """
import torch_xla, torch_xla.distributed.xla_multiprocessing as xmp

def raw_worker(index):
    figures = train_loop(torch_xla.device(), lambda step, loss, input_ids: None)
    print("FIGURES raw " + json.dumps(figures), flush=True)

xmp.spawn(raw_worker, start_method="fork")
"""

TPU_NB = """%%tpu_train
def on_step(step, loss, input_ids):
    report(step=step, loss=loss, max_steps=STEPS, tokens=(input_ids != 0).sum(), samples=32)
figures = train_loop(device, on_step)
print("FIGURES tpu_nb " + json.dumps(figures), flush=True)
"""

NO_DOCTOR = TPU_NB.replace("%%tpu_train", "%%tpu_train --no-doctor").replace("FIGURES tpu_nb", "FIGURES no_doctor")


def main() -> None:
    notebook = nbformat.v4.new_notebook()
    cells = [SETUP, "%load_ext tpu_nb"] + [RAW, TPU_NB, NO_DOCTOR] * ROUNDS
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    NotebookClient(notebook, timeout=3600, kernel_name="python3").execute(env=dict(os.environ, PJRT_DEVICE="CPU"))
    results: dict[str, list[dict[str, float]]] = {"raw": [], "tpu_nb": [], "no_doctor": []}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for match in re.finditer(r"FIGURES (\w+) (\{.*\})", output.get("text", "")):
                results[match.group(1)].append(json.loads(match.group(2)))

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in results[name])

    print(f"{STEPS - WARMUP} steps after {WARMUP} warm-up steps, tiny BERT, XLA:CPU, one worker; {ROUNDS} runs of each, alternating")
    for name, runs in results.items():
        rates = [run["steps_per_s"] for run in runs]
        print(
            f"{name:>9}: steps/s median {statistics.median(rates):.2f} (min {min(rates):.2f}, max {max(rates):.2f}) | "
            f"compilations after warm-up {median(name, 'compiles_after_warmup'):.0f} (total {median(name, 'compiles_total'):.0f}) | "
            f"transfers after warm-up {median(name, 'transfers_after_warmup'):.0f} | CPU per step: process "
            f"{median(name, 'cpu_us_per_step'):.0f} us, training thread {median(name, 'training_thread_us_per_step'):.0f} us, "
            f"tpu_nb's threads and report() {median(name, 'own_cpu_us_per_step'):.0f} us"
        )
    ratio = median("tpu_nb", "steps_per_s") / median("raw", "steps_per_s")
    print(f"throughput ratio tpu_nb/raw (medians): {ratio:.3f} (target >= 0.98)")
    doctor = median("tpu_nb", "steps_per_s") / median("no_doctor", "steps_per_s")
    print(f"throughput ratio doctor on/off (medians): {doctor:.3f} (target >= 0.99)")
    extra = median("tpu_nb", "transfers_after_warmup") - median("raw", "transfers_after_warmup")
    seconds = median("tpu_nb", "seconds")
    print(
        f"extra transfers: {extra:.0f} over {seconds:.1f}s (at most two per 0.25 s reporting interval, the loss and the "
        f"token count: {2 * seconds / 0.25:.0f}; {STEPS - WARMUP} steps)"
    )
    own = median("tpu_nb", "own_cpu_us_per_step")
    # The training thread also runs the doctor's input watch and host-read hooks: its extra time over raw counts too.
    in_thread = median("tpu_nb", "training_thread_us_per_step") - median("raw", "training_thread_us_per_step")
    added = own + max(in_thread - own, 0)
    print(
        f"tpu_nb's CPU time per step, throughput on (tokens and samples counted, the step's time split read): its "
        f"threads (heartbeat, doctor) and report() {own:.0f} us; the training thread "
        f"{in_thread:+.0f} us over raw (report() included); together {added:.0f} us, {added / 1000:.2f}% of a 100 ms TPU step "
        f"(target < 1%). Without the doctor: {median('no_doctor', 'own_cpu_us_per_step'):.0f} us and "
        f"{median('no_doctor', 'training_thread_us_per_step') - median('raw', 'training_thread_us_per_step'):+.0f} us. "
        f"Process CPU, tpu_nb minus raw: {median('tpu_nb', 'cpu_us_per_step') - median('raw', 'cpu_us_per_step'):+.0f} us "
        "(noisy: XLA:CPU computes on the same cores)"
    )


if __name__ == "__main__":
    main()
