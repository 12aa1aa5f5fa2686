"""A pod run from a real kernel, on a simulated TPU VM slice (the fake gcloud runs each host as a process)."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from nbclient import NotebookClient
from nbclient.util import run_sync
from support.kernel import Kernel, errors_of, shown, text_of
from support.pods import SimulatedSlice, simulate_gke, simulate_slice
from support.processes import STARTUP, wait_until

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
    assert ">Host</th>" in summary and "stopped by the user at step" in summary  # a worker row per host, in the summary
    assert "TPU VM my-slice: v4-16, 2 hosts of 4 chips" in summary
    check = pod_kernel.run("print(bool((model.weight != before).any()))", allow_errors=False)
    assert "True" in text_of(check)
    assert any("stop.partial" in " ".join(call) for call in pod.calls())  # the stop reached every host through gcloud
    assert wait_until(lambda: pod.live_processes() == [], 10), pod.live_processes()


TRAIN_IN_BACKGROUND = TRAIN_UNTIL_STOPPED.replace(
    "%%tpu_train --pod my-slice --return model", "%%tpu_train --pod my-slice --background --name job"
)


def reapers(of_kernel: int) -> list[int]:
    """Live tpu_nb reaper processes that kernel `of_kernel` started (its children until it dies; other tests run their own)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            command = (entry / "cmdline").read_bytes()
            state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if b"tpu_nb/kernel/pod/reaper.py" in command and state not in ("Z", "X") and int(parent) == of_kernel:
            found.append(int(entry.name))
    return found


def gone(pids: list[int]) -> bool:
    """Whether none of `pids` runs (a pid another process took since would count as running: a rare false "no")."""

    def running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    return not any(running(pid) for pid in pids)


def test_a_kernel_killed_during_a_pod_run_ends_it_on_every_host_and_the_next_launch_starts(
    pod_kernel: Kernel, pod: SimulatedSlice, ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod_kernel.run("%load_ext tpu_nb", allow_errors=False)
    pod_kernel.run(PREPARE, allow_errors=False)
    pod_kernel.run(TRAIN_IN_BACKGROUND, allow_errors=False)
    assert wait_until(lambda: "training" in text_of(pod_kernel.run("print(job.status, len(job.metrics) > 2 and 'training')")), STARTUP)
    assert len([command for command in pod.live_processes() if "train.py" in command]) >= 2  # every host trains
    ours = reapers(pod_kernel.pid)
    assert ours
    os.kill(pod_kernel.pid, signal.SIGKILL)
    assert wait_until(lambda: pod.live_processes() == [], 60), pod.live_processes()
    assert wait_until(lambda: gone(ours), 30)
    assert any("kill -TERM" in " ".join(call) for call in pod.calls())  # the reaper's commands reached every host
    # The slice is free: the next launch (here from another shell) starts, with nothing stale found.
    monkeypatch.chdir(tmp_path)
    with capture_output():
        result = ip.run_cell("%%tpu_train --pod my-slice --no-progress\n'the slice is free'")
    assert result.success and result.result == "the slice is free", result.error_in_exec


def test_a_kernel_restarted_during_a_gke_run_deletes_its_jobset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = simulate_gke(monkeypatch, tmp_path / "cluster", nodes=2)
    notebook = nbformat.v4.new_notebook()
    client = NotebookClient(
        notebook, kernel_name="python3", timeout=120, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
    )
    with client.setup_kernel(env=dict(os.environ, PJRT_DEVICE="CPU")):
        kernel = Kernel(client, notebook)
        kernel.run("%load_ext tpu_nb", allow_errors=False)
        kernel.run(PREPARE, allow_errors=False)
        gke = f"--pod tiny --image example.com/xla --accelerator v4-16 --run-dir file://{tmp_path}/bucket --background --name job"
        kernel.run(TRAIN_IN_BACKGROUND.replace("--pod my-slice --background --name job", gke).replace('os.environ["TPU_WORKER_ID"]', "0"))
        assert wait_until(lambda: any(name.startswith("jobset-") for name in cluster.objects()), STARTUP), cluster.objects()
        assert wait_until(lambda: "True" in text_of(kernel.run("print(len(job.metrics) > 2)")), STARTUP)
        ours = reapers(kernel.pid)
        assert ours
        run_sync(client.km.restart_kernel)(now=False)  # what Jupyter's "Restart kernel" does
        assert wait_until(lambda: cluster.objects() == [], 60), cluster.objects()
        assert wait_until(lambda: cluster.live_processes() == [], 30), cluster.live_processes()
        assert wait_until(lambda: gone(ours), 30)
        assert not list(Path(tempfile.gettempdir()).glob(f"tpu_nb-pod-{kernel.pid}-*"))  # the gs:// run's local copy went too
