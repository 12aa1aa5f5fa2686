"""Pod runs on a simulated TPU VM slice: the fake gcloud runs each host as a local process on XLA:CPU.

Each simulated host is its own XLA world (no collectives between them), so
these tests check what tpu_nb does around the run: what is copied and
started where, the events of every host, failures, Stop and Kill on every
host, and that nothing is left running.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.pods import SimulatedSlice, simulate_slice
from support.processes import wait_until

from tpu_nb.kernel.errors import LaunchRefused, TrainingInterrupted, WorkerError
from tpu_nb.kernel.options import LaunchOptions
from tpu_nb.kernel.pod.following import PodRun
from tpu_nb.kernel.pod.program import PodProgram, write_run_directory
from tpu_nb.kernel.pod.tpu_vm import TpuVmSlice
from tpu_nb.wire.events import Event, Heartbeat, Progress, Stopping, WorkerStarted
from tpu_nb.workers.host import Cell

PREPARE = """\
import os, time
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
data = torch.randn(32, 4)
target = data.sum(dim=1, keepdim=True)
"""

TRAIN = """\
import torch_xla
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range({steps}):
    loss = torch.nn.functional.mse_loss(model(data.to(device)), target.to(device))
    loss.backward(); optimizer.step(); optimizer.zero_grad(); torch_xla.sync()
    time.sleep({pause})
    if step == 3 and os.environ["TPU_WORKER_ID"] == "{failing_host}":
        raise ValueError("bad shard on this host")
    report(step=step, loss=loss)
round(float(loss), 6)
"""


@pytest.fixture
def pod(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedSlice:
    simulated = simulate_slice(monkeypatch, tmp_path / "slice")
    monkeypatch.chdir(tmp_path)
    return simulated


def run_cell(shell: InteractiveShell, cell: str):  # type: ignore[no-untyped-def]
    with capture_output() as captured:
        result = shell.run_cell(cell)
    return result, captured


def test_a_pod_run_copies_starts_and_returns_like_a_local_run(ip: InteractiveShell, pod: SimulatedSlice) -> None:
    result, _ = run_cell(ip, "%%tpu_prepare\n" + PREPARE)
    assert result.success
    before = ip.user_ns["model"].weight.detach().clone()
    train = TRAIN.format(steps=20, pause=0, failing_host="none")
    result, captured = run_cell(ip, f"%%tpu_train --pod my-slice --zone us-central2-b --no-progress --return model\n{train}")
    assert result.success, f"{result.error_in_exec}\n{captured.stderr}"
    assert isinstance(result.result, float) and result.result < 1.0
    assert not torch.equal(ip.user_ns["model"].weight, before)  # rank 0's trained weights, loaded in place
    assert "updated `model` in place" in captured.stdout

    calls = [" ".join(call) for call in pod.calls()]
    assert any(call.startswith("auth list --filter=status:ACTIVE") for call in calls)
    assert any(call.startswith("compute tpus tpu-vm describe my-slice") and "--zone us-central2-b" in call for call in calls)
    [copy] = [call for call in calls if " scp " in f" {call} " and "--worker=all" in call]
    [start] = [call for call in pod.calls() if "ssh" in call and any("exec python3 train.py" in arg for arg in call)]
    assert "--worker=all" in start and "--quiet" in start
    command = next(arg for arg in start if arg.startswith("--command="))
    assert "PJRT_DEVICE=${PJRT_DEVICE:-TPU}" in command
    run_name = shlex.split(command.removeprefix("--command="))[1].split("/")[1]
    for host in range(pod.hosts):  # every host got the run directory, and ran it
        run_dir = pod.home(host) / "tpu_nb_runs" / run_name
        assert (run_dir / "train.py").exists() and (run_dir / "tpu_nb" / "workers" / "host.py").exists()
        assert (run_dir / "results" / "result-0.json").exists()
    assert any("scp" in call and "--worker=0" in call and f"my-slice:tpu_nb_runs/{run_name}/results" in call for call in calls)
    assert copy
    assert pod.live_processes() == []


class Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        return [event for event in self.events if isinstance(event, kind)]


def start_run(pod: SimulatedSlice, tmp_path: Path, train: str, events: Events, python: str = "python3") -> PodRun:
    program = PodProgram((Cell("In [1]", "%%tpu_prepare", PREPARE),), Cell("In [2]", "%%tpu_train --pod my-slice", train), ("model",))
    vm = TpuVmSlice(pod.name, python=python)
    run_dir = write_run_directory(program, tmp_path / "runs" / "run-1", "run-1", hosts=2, devices=8)
    TpuVmSlice(pod.name).host_versions()  # makes ~/tpu_nb_runs on each host, as the preflight does
    run = PodRun(vm, run_dir, LaunchOptions(progress=False, stop_grace=5.0), "test", write=lambda stream, text: None, observers=[events])
    run.start()
    return run


def follow(run: PodRun) -> None:
    while not run.ended:
        run.poll()


def test_every_host_reports_and_a_graceful_stop_stops_every_host_at_the_same_step(pod: SimulatedSlice, tmp_path: Path) -> None:
    events = Events()
    run = start_run(pod, tmp_path, TRAIN.format(steps=100_000, pause=0.05, failing_host="none"), events)
    try:
        while not any(event.step is not None and event.step >= 5 for event in events.of(Progress)):
            run.poll()
        assert run.request_stop()
        follow(run)
        ending = run.finish()
    finally:
        run.close()
    assert ending.status == "stopped", ending.text
    assert "model" in ending.results[0].returned
    assert {event.rank for event in events.of(WorkerStarted)} == {0, 1}  # a worker row per host
    assert {event.rank for event in events.of(Heartbeat)} <= {0, 1} and events.of(Heartbeat)
    stops = {event.rank: event.step for event in events.of(Stopping)}
    assert set(stops) == {0, 1} and len(set(stops.values())) == 1, stops
    assert any("stop.partial" in " ".join(call) for call in pod.calls())
    assert pod.live_processes() == []


def test_a_failure_on_host_1_fails_the_run_with_its_traceback_and_ends_every_host(pod: SimulatedSlice, tmp_path: Path) -> None:
    events = Events()
    run = start_run(pod, tmp_path, TRAIN.format(steps=100_000, pause=0.05, failing_host="1"), events)
    try:
        follow(run)
        ending = run.finish()
    finally:
        run.close()
    error = ending.error
    assert isinstance(error, WorkerError) and error.host == 1
    rendered = "\n".join(error._render_traceback_())
    assert 'File "In [2]", line 10' in rendered and 'raise ValueError("bad shard on this host")' in rendered
    assert "ValueError: bad shard on this host" in rendered
    assert "(raised on host 1 (rank 0 of 1); every host was stopped)" in rendered
    assert any("kill -TERM" in " ".join(call) for call in pod.calls())
    assert wait_until(lambda: pod.live_processes() == [], 10), pod.live_processes()


def test_kill_ends_every_host_at_once(pod: SimulatedSlice, tmp_path: Path) -> None:
    events = Events()
    run = start_run(pod, tmp_path, TRAIN.format(steps=100_000, pause=0.05, failing_host="none"), events)
    try:
        while len({event.rank for event in events.of(Heartbeat)}) < 2:
            run.poll()
        run.request_kill()
        follow(run)
        ending = run.finish()
    finally:
        run.close()
    assert isinstance(ending.error, TrainingInterrupted)
    assert wait_until(lambda: pod.live_processes() == [], 10), pod.live_processes()


def test_hosts_that_cannot_tell_their_number_still_get_a_row_each(
    pod: SimulatedSlice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GCLOUD_NO_WORKER_ID", "1")  # every host says it is host 0
    events = Events()
    run = start_run(pod, tmp_path, TRAIN.format(steps=5, pause=0, failing_host="none").replace('os.environ["TPU_WORKER_ID"]', '""'), events)
    try:
        follow(run)
        ending = run.finish()
    finally:
        run.close()
    assert ending.status == "done", ending.text
    assert {event.rank for event in events.of(WorkerStarted)} == {0, 1}


def test_hosts_that_never_start_fail_the_run_with_what_gcloud_said(pod: SimulatedSlice, tmp_path: Path) -> None:
    run = start_run(pod, tmp_path, "1", Events(), python="no-such-python")
    try:
        follow(run)
        ending = run.finish()
    finally:
        run.close()
    assert ending.status == "failed"
    assert ending.text is not None and ending.text.startswith("host 0, 1 ended without a word (gcloud exited with code 127: ")
    assert "no-such-python" in ending.text


def test_refused_before_anything_starts(ip: InteractiveShell, pod: SimulatedSlice, monkeypatch: pytest.MonkeyPatch) -> None:
    train = "%%tpu_train --pod {name} --no-progress\n1 + 1"
    result, _ = run_cell(ip, train.format(name="no-such-slice"))
    assert isinstance(result.error_in_exec, LaunchRefused)
    assert "no TPU VM named 'no-such-slice'" in str(result.error_in_exec)
    monkeypatch.setenv("FAKE_GCLOUD_ACCOUNT", "")
    result, _ = run_cell(ip, train.format(name="my-slice"))
    assert isinstance(result.error_in_exec, LaunchRefused) and "gcloud auth login" in str(result.error_in_exec)
    assert not any("ssh" in call for call in pod.calls())  # nothing ran on any host
    result, _ = run_cell(ip, "%%tpu_train --pod my-slice --cores 2\n1")
    assert isinstance(result.error_in_exec, UsageError) and "--cores" in str(result.error_in_exec)


def test_pod_launch_runs_a_function_after_the_prepared_cells(ip: InteractiveShell, pod: SimulatedSlice) -> None:
    with capture_output():
        assert ip.run_cell("%%tpu_prepare\n" + PREPARE).success
        result = ip.run_cell(
            "def train():\n"
            "    import torch_xla\n"
            "    model.to(device)\n"
            "    loss = torch.nn.functional.mse_loss(model(data.to(device)), target.to(device))\n"
            "    loss.backward()\n"
            "    return round(float(loss), 6)\n"
            "import tpu_nb\n"
            "tpu_nb.pod.launch(train, 'my-slice', returns=('model',), progress=False)\n"
        )
    assert result.success, result.error_in_exec
    assert isinstance(result.result.value, float)
    weights = result.result.returned["model"]
    assert set(weights) == {"weight", "bias"} and isinstance(weights["weight"], torch.Tensor)
    assert pod.live_processes() == []


def test_a_background_pod_run_leaves_the_notebook_free_and_stops_on_every_host(ip: InteractiveShell, pod: SimulatedSlice) -> None:
    with capture_output():
        assert ip.run_cell("%%tpu_prepare\n" + PREPARE).success
        before = ip.user_ns["model"].weight.detach().clone()
        train = TRAIN.format(steps=100_000, pause=0.05, failing_host="none")
        result = ip.run_cell(f"%%tpu_train --pod my-slice --background --name job --no-progress --return model\n{train}")
        assert result.success, result.error_in_exec
        job = ip.user_ns["job"]
        assert job.status == "running"
        assert wait_until(lambda: len(job.metrics) >= 3, 60), job.status
        job.stop()
        job.wait(120)
    assert job.status == "stopped"
    assert not torch.equal(ip.user_ns["model"].weight, before)  # the weights trained until the stop, loaded in place
    assert any("stop.partial" in " ".join(call) for call in pod.calls())
    assert wait_until(lambda: pod.live_processes() == [], 10), pod.live_processes()


def test_a_slice_that_is_not_ready_or_not_whole_is_refused(
    ip: InteractiveShell, pod: SimulatedSlice, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GCLOUD_STATE", "STOPPED")
    result, _ = run_cell(ip, "%%tpu_train --pod my-slice --no-progress\n1")
    assert isinstance(result.error_in_exec, LaunchRefused)
    assert "TPU VM my-slice is STOPPED, not READY: start it (gcloud compute tpus tpu-vm start my-slice)" in str(result.error_in_exec)
    monkeypatch.setenv("FAKE_GCLOUD_STATE", "READY")
    monkeypatch.setenv("FAKE_GCLOUD_ENDPOINTS", "1")
    result, _ = run_cell(ip, "%%tpu_train --pod my-slice --no-progress\n1")
    assert "TPU VM my-slice is a v4-16 (2 hosts) but gcloud lists 1 hosts." in str(result.error_in_exec)
    monkeypatch.setenv("FAKE_GCLOUD_ENDPOINTS", "2")
    result, _ = run_cell(ip, "%%tpu_train --pod my-slice --spmd --mesh fsdp=4 --no-progress\n1")
    assert "--mesh fsdp=4 covers 4 devices, but a v4-16 has 8." in str(result.error_in_exec)
    assert not any("scp" in call for call in pod.calls())  # nothing was copied anywhere
