"""A pod run from a real kernel, on a simulated TPU VM slice (the fake gcloud runs each host as a process)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from support.kernel import Kernel, errors_of, shown, text_of
from support.pods import SimulatedSlice, simulate_slice
from support.processes import wait_until

PREPARE = """%%tpu_prepare
import os
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
data = torch.randn(64, 4)
target = data.sum(dim=1, keepdim=True)
"""

TRAIN_UNTIL_STOPPED = """%%tpu_train --pod my-slice --return model
import time
import torch_xla
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(100_000):
    loss = torch.nn.functional.mse_loss(model(data.to(device)), target.to(device))
    loss.backward(); optimizer.step(); optimizer.zero_grad(); torch_xla.sync()
    if step == 3:
        print("training on host", os.environ["TPU_WORKER_ID"], flush=True)
    time.sleep(0.02)
    report(step=step, loss=loss)
"""


@pytest.fixture
def pod(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedSlice:
    return simulate_slice(monkeypatch, tmp_path / "slice")


@pytest.fixture
def pod_kernel(pod: SimulatedSlice, tmp_path: Path) -> Iterator[Kernel]:
    """A kernel that finds the fake gcloud on its PATH, working in tmp_path."""
    notebook = nbformat.v4.new_notebook()
    client = NotebookClient(
        notebook, kernel_name="python3", timeout=120, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
    )
    with client.setup_kernel(env=dict(os.environ, PJRT_DEVICE="CPU")):
        yield Kernel(client, notebook)


def test_an_interrupt_stops_every_host_gracefully_and_the_trained_model_comes_back(pod_kernel: Kernel, pod: SimulatedSlice) -> None:
    pod_kernel.run("%load_ext tpu_nb", allow_errors=False)
    pod_kernel.run(PREPARE, allow_errors=False)
    pod_kernel.run("before = model.weight.detach().clone()", allow_errors=False)
    cell, _ = pod_kernel.run_and_interrupt(TRAIN_UNTIL_STOPPED, when="training on host 0", timeout=180)
    assert not errors_of(cell), shown(cell)
    output = shown(cell)
    assert "updated `model` in place" in output
    assert "training on host 1" not in output  # host 0's prints only, as rank 0's on one machine
    summary = "".join(item.get("data", {}).get("text/html", "") for item in cell.outputs if item.output_type == "display_data")
    assert ">Host</th>" in summary and "stopped by user at step" in summary  # a worker row per host, in the summary
    assert "TPU VM my-slice: v4-16, 2 hosts of 4 chips" in summary
    check = pod_kernel.run("print(bool((model.weight != before).any()))", allow_errors=False)
    assert "True" in text_of(check)
    assert any("stop.partial" in " ".join(call) for call in pod.calls())  # the stop reached every host through gcloud
    assert wait_until(lambda: pod.live_processes() == [], 10), pod.live_processes()
