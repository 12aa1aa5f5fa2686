"""Graceful stops and background runs in a real kernel (issue: keep what was learned)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from support.kernel import Kernel, errors_of, text_of
from support.processes import STARTUP, descendants, wait_until
from test_dashboard_kernel import TRAINER_SETUP, widgets

LOOP_SETUP = """
import time, torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
initial = model.weight.detach().clone()
"""

LOOP = """%%tpu_train --return model
import torch_xla.core.xla_model as xm
import tpu_nb
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while True:
    loss = model(torch.ones(8, 4, device=device)).pow(2).mean()
    loss.backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    xm.mark_step()
    step += 1
    if step == 5:
        print("training", flush=True)
    time.sleep(0.05)
    try:
        report(step=step, loss=loss)
    except tpu_nb.StopTraining as stop:
        print("worker:", stop, flush=True)  # the worker's own words for who stopped it
        raise
"""


def test_one_interrupt_stops_a_loop_and_keeps_its_weights(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(LOOP_SETUP, allow_errors=False)
    cell, interrupted_at = kernel.run_and_interrupt(LOOP, when="training")
    assert not errors_of(cell), text_of(cell)
    assert time.monotonic() - interrupted_at < 10
    assert "updated `model` in place" in text_of(cell)
    changed = kernel.run("print(bool((model.weight != initial).any()))", allow_errors=False)
    assert text_of(changed).strip() == "True"
    summary = [output for output in cell.outputs if "image/png" in output.get("data", {})]
    assert "stopped by the user at step" in summary[0].data["text/plain"]
    assert "worker: stopped by the user at step" in text_of(cell)
    assert not descendants(kernel.pid)


TRAINER_FOREVER = """%%tpu_train --return model
import time
from transformers import TrainerCallback

class Announce(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            print("training", flush=True)
        time.sleep(0.1)

args = TrainingArguments(output_dir, per_device_train_batch_size=16, max_steps=100000, logging_steps=5,
                         report_to=[], save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=train_data, callbacks=[Announce()])
trainer.train()
print("stopped at", trainer.state.global_step)
"""


def test_one_interrupt_stops_a_trainer_which_saves_a_checkpoint(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(TRAINER_SETUP + "\ninitial = {k: v.clone() for k, v in model.state_dict().items()}", allow_errors=False)
    cell, _ = kernel.run_and_interrupt(TRAINER_FOREVER, when="training", timeout=300)
    assert not errors_of(cell), text_of(cell)
    assert "stopped at" in text_of(cell)
    check = kernel.run(
        "import os\n"
        "print(sorted(d for d in os.listdir(output_dir) if d.startswith('checkpoint-')))\n"
        "print(any(not torch.equal(initial[k], v) for k, v in model.state_dict().items()))",
        allow_errors=False,
    )
    checkpoints, changed = text_of(check).strip().splitlines()
    assert "checkpoint-" in checkpoints
    assert changed == "True"
    [bar] = widgets(kernel, "IntProgressModel")
    assert bar["bar_style"] == "warning"
    assert not descendants(kernel.pid)


def test_a_loop_without_step_boundaries_is_stopped_hard_within_the_grace(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    cell, interrupted_at = kernel.run_and_interrupt(
        "%%tpu_train --stop-grace 2\nimport time\nprint('sleeping', flush=True)\ntime.sleep(600)\n", when="sleeping"
    )
    assert time.monotonic() - interrupted_at < 10
    [error] = errors_of(cell)
    assert error.ename == "TrainingInterrupted"
    assert wait_until(lambda: not descendants(kernel.pid), timeout=10)


BACKGROUND = """%%tpu_train --background --name job --return model losses
import torch_xla.core.xla_model as xm
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
losses = []
for step in range(1, STEPS + 1):
    loss = model(torch.ones(8, 4, device=device)).pow(2).mean()
    loss.backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    xm.mark_step()
    time.sleep(0.05)
    report(step=step, loss=loss, max_steps=STEPS)
    losses.append(step)
len(losses)
"""


def test_a_background_run_leaves_the_notebook_free_and_returns_its_results(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(LOOP_SETUP + "\nSTEPS = 60", allow_errors=False)
    started = kernel.run(BACKGROUND, allow_errors=False)
    assert "<tpu_nb run 'job': running>" in text_of(started)
    meanwhile = kernel.run("print('free', job.status, 6 * 7)", allow_errors=False)
    assert text_of(meanwhile).strip() == "free running 42"
    refused = kernel.run("%%tpu_train\n1")
    [error] = errors_of(refused)
    assert "background run `job` is still running" in error.evalue
    finished = kernel.run("print(job.wait(120), job.status, len(losses), bool((model.weight != initial).any()))", timeout=180)
    assert text_of(finished).strip() == "60 done 60 True"
    assert not descendants(kernel.pid)


def test_background_stop_and_the_stop_button_each_stop_gracefully(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(LOOP_SETUP + "\nSTEPS = 100000", allow_errors=False)
    for how in ("job.stop()", "controls = [w for w in job_widgets() if getattr(w, 'description', '') == 'Stop']\ncontrols[-1].click()"):
        kernel.run(
            "import ipywidgets\n"
            "def job_widgets():\n"
            "    return [w for w in ipywidgets.Widget.widgets.values() if isinstance(w, ipywidgets.Button)]",
            allow_errors=False,
        )
        kernel.run(BACKGROUND, allow_errors=False)
        assert wait_until(lambda: "True" in text_of(kernel.run("print(len(job.metrics) > 3)")), timeout=STARTUP)
        kernel.run(how, allow_errors=False)
        result = kernel.run("print(job.wait(60), job.status)", timeout=90)
        value, status = text_of(result).split()
        assert status == "stopped"
        assert value == "None"  # stopped inside report(): the last line never ran
        assert text_of(kernel.run("print('losses' in dir())")).strip() == "True"  # --return came back
        assert not descendants(kernel.pid)


@pytest.mark.fresh_kernel
def test_kernel_shutdown_ends_a_background_run(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(LOOP_SETUP + "\nSTEPS = 100000", allow_errors=False)
    kernel.run(BACKGROUND, allow_errors=False)
    assert wait_until(lambda: len(descendants(kernel.pid)) >= 2, timeout=STARTUP)
    workers = descendants(kernel.pid)
    os.kill(kernel.pid, signal.SIGTERM)  # what a kernel shutdown or restart ends with
    assert wait_until(lambda: not [pid for pid in workers if _alive(pid)], timeout=15), workers


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_launch_in_the_background_gets_the_same_buttons_and_output_area(kernel: Kernel) -> None:
    kernel.run(
        "import time, tpu_nb\n"
        "def train(steps):\n"
        "    for step in range(1, steps + 1):\n"
        "        time.sleep(0.05)\n"
        "        tpu_nb.report(step=step, loss=1.0 / step, max_steps=steps)\n"
        "    return steps\n",
        allow_errors=False,
    )
    started = kernel.run("handle = tpu_nb.launch(train, 100000, background=True)\nhandle", allow_errors=False)
    assert "<tpu_nb run 'train': running>" in text_of(started)
    buttons = {state["description"]: state for state in widgets(kernel, "ButtonModel")}
    assert set(buttons) == {"Stop", "Kill", "Where are they?"} and not buttons["Stop"]["disabled"]
    assert wait_until(lambda: "True" in text_of(kernel.run("print(len(handle.metrics) > 3)")), timeout=STARTUP)
    kernel.run(
        "where = [w for w in __import__('ipywidgets').Widget.widgets.values() if getattr(w, 'description', '') == 'Where are they?']\n"
        "where[-1].click()"
    )
    [area] = widgets(kernel, "OutputModel")
    answer = "".join(output.get("text", "") for output in area["outputs"])
    assert "Where are they? " in answer and "rank 0 at step" in answer and "(asked for)" in answer, answer
    kernel.run(
        "stop = [w for w in __import__('ipywidgets').Widget.widgets.values() if getattr(w, 'description', '') == 'Stop']\nstop[-1].click()"
    )
    ended = kernel.run("print(handle.wait(60), handle.status)", timeout=90)
    assert text_of(ended).strip() == "None stopped"  # stopped inside report(): train never returned
    # The end message went to the run's own output area, not to the cell that happened to run.
    assert "ended" not in text_of(ended)
    [area] = widgets(kernel, "OutputModel")
    assert "tpu_nb: run `train` ended: stopped by the user at step" in "".join(output.get("text", "") for output in area["outputs"])
    buttons = {state["description"]: state for state in widgets(kernel, "ButtonModel")}
    assert buttons["Stop"]["disabled"] and buttons["Kill"]["disabled"] and buttons["Where are they?"]["disabled"]
    assert not descendants(kernel.pid)


SPMD_LOOP = """%%tpu_train --spmd --cores 4 --return model
import torch_xla, tpu_nb
tpu_nb.spmd.shard_model(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while True:
    loss = model(torch.ones(8, 4, device=device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    step += 1
    if step == 5:
        print("training on", world_size, "devices, mesh", dict(zip(mesh.axis_names, mesh.mesh_shape)), flush=True)
    time.sleep(0.05)
    report(step=step, loss=loss)
"""


def test_an_spmd_run_stops_gracefully_then_hard_and_leaves_nothing(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(LOOP_SETUP.replace("Linear(4, 1)", "Linear(4, 8)"), allow_errors=False)
    cell, _ = kernel.run_and_interrupt(SPMD_LOOP, when="training")
    assert not errors_of(cell), text_of(cell)
    assert "training on 4 devices, mesh {'fsdp': 4, 'tensor': 1}" in text_of(cell)
    assert "updated `model` in place" in text_of(cell)
    assert text_of(kernel.run("print(bool((model.weight != initial).any()))", allow_errors=False)).strip() == "True"
    assert not descendants(kernel.pid)

    # A loop that never reaches report(): the graceful stop falls back to the hard one after the grace.
    no_boundary = SPMD_LOOP.replace("--return model", "--stop-grace 1").replace("    report(step=step, loss=loss)\n", "")
    hard, _ = kernel.run_and_interrupt(no_boundary, when="training")
    assert [error.ename for error in errors_of(hard)] == ["TrainingInterrupted"]
    assert wait_until(lambda: not descendants(kernel.pid), timeout=10), descendants(kernel.pid)
