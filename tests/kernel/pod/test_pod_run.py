"""Pod runs on a simulated TPU VM slice: the fake gcloud runs each host as a local process on XLA:CPU.

Each simulated host is its own XLA world (no collectives between them), so
these tests check what tpu_nb does around the run: what is copied and
started where, the events of every host, failures, Stop and Kill on every
host, and that nothing is left running.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.pods import SimulatedSlice, simulate_slice
from support.processes import STARTUP, wait_until

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused, RunEnded, TrainingInterrupted, WorkerError
from tpu_nb.kernel.notebook.cell_output import Write
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.backends.tpu_vm import TpuVmSlice
from tpu_nb.kernel.pod.pod_run import PodRun
from tpu_nb.kernel.pod.program import PodProgram, write_run_directory
from tpu_nb.runtime.system import SystemView
from tpu_nb.wire.events import Event, Heartbeat, Output, Progress, Stalled, Stopping, WorkerStarted
from tpu_nb.wire.run_directory import Cell, write_group
from tpu_nb.wire.stacks import StackReport, WatchdogSetting
from tpu_nb.wire.stop_reason import StopReason

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


@pytest.fixture
def one_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedSlice:
    """A TPU VM of one host (a v4-8): for what a pod run does the same whatever its number of hosts."""
    simulated = simulate_slice(monkeypatch, tmp_path / "slice", accelerator="v4-8", hosts=1)
    monkeypatch.chdir(tmp_path)
    return simulated


def run_cell(shell: InteractiveShell, cell: str):  # type: ignore[no-untyped-def]
    with capture_output() as captured:
        result = shell.run_cell(cell)
    return result, captured


def test_a_pod_run_copies_starts_and_returns_like_a_local_run_in_private_directories(
    ip: InteractiveShell, pod: SimulatedSlice, tmp_path: Path
) -> None:
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
        assert (run_dir / "train.py").exists() and (run_dir / "tpu_nb" / "workers" / "processes" / "pod_host.py").exists()
        assert (run_dir / "results" / "result-0.json").exists()
    assert any("scp" in call and "--worker=0" in call and f"my-slice:tpu_nb_runs/{run_name}/results" in call for call in calls)
    assert copy
    assert pod.live_processes() == []
    # Private here and on the hosts: a run directory holds the prepared cells (tokens among them).
    [run_dir] = (tmp_path / "tpu_nb_pod_runs").iterdir()
    for path in (tmp_path / "tpu_nb_pod_runs", run_dir, run_dir / "tpu_nb"):
        assert path.stat().st_mode & 0o777 == 0o700, path
    for path in (run_dir / "train.py", run_dir / "manifest.json", run_dir / "tpu_nb" / "__init__.py"):
        assert path.stat().st_mode & 0o777 == 0o600, path
    for host in range(pod.hosts):
        assert (pod.home(host) / "tpu_nb_runs").stat().st_mode & 0o777 == 0o700


class Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        return [event for event in self.events if isinstance(event, kind)]


def start_run(
    pod: SimulatedSlice,
    tmp_path: Path,
    train: str,
    events: Events,
    python: str = "python3",
    write: Write = lambda stream, text: None,
    watchdog: WatchdogSetting | None = None,
    all_ranks_output: bool = False,
) -> PodRun:
    cells = (Cell("In [1]", "%%tpu_prepare", PREPARE),), Cell("In [2]", "%%tpu_train --pod my-slice", train)
    program = PodProgram(*cells, ("model",)) if watchdog is None else PodProgram(*cells, ("model",), watchdog=watchdog)
    vm = TpuVmSlice(pod.name, python=python)
    run_dir = write_run_directory(
        program, tmp_path / "runs" / "run-1", "run-1", hosts=pod.hosts, devices=4 * pod.hosts
    )  # v4: 4 chips a host
    TpuVmSlice(pod.name).host_versions()  # makes ~/tpu_nb_runs on each host, as the preflight does
    run = PodRun(
        vm,
        run_dir,
        LaunchOptions(progress=False, stop_grace=5.0, all_ranks_output=all_ranks_output),
        "test",
        write=write,
        observers=[events],
    )
    run.start()
    return run


def follow(run: PodRun) -> None:
    while not run.ended:
        run.poll()


@pytest.fixture
def pod_world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedSlice:
    """A simulated slice whose hosts' processes (2 per host) form one world, kept in lock-step by collectives as on a slice."""
    simulated = simulate_slice(monkeypatch, tmp_path / "slice", processes_per_host=2)
    monkeypatch.chdir(tmp_path)
    return simulated


def test_every_host_reports_and_a_graceful_stop_stops_every_host_at_the_same_step_for_its_reason(
    pod_world: SimulatedSlice, tmp_path: Path
) -> None:
    events = Events()
    in_step = TRAIN.replace("import torch_xla\n", "import torch_xla\nimport torch_xla.core.xla_model as xm\n")
    in_step = in_step.replace("optimizer.step();", "xm.optimizer_step(optimizer);")  # gradients averaged over both hosts' processes
    in_step = "print('world of', world_size, flush=True)\n" + in_step
    run = start_run(pod_world, tmp_path, in_step.format(steps=100_000, pause=0.05, failing_host="none"), events, all_ranks_output=True)
    try:
        while not any(event.step is not None and event.step >= 5 for event in events.of(Progress)):
            run.poll()
        assert run.request_stop(StopReason.DEADLINE)  # as the run's deadline asks it: the stop file carries the reason
        follow(run)
        ending = run.finish()
    finally:
        run.close()
    assert ending.status == "stopped" and (ending.text or "").startswith("stopped by its deadline at step"), ending.text
    assert "model" in ending.results[0].returned
    printed = "".join(event.text for event in events.of(Output))
    assert printed.count("world of 4\n") == 4  # both hosts' 2 processes in one world
    assert printed.count("[host 1] world of 4\n") == 2 and printed.count("[host 0] world of 4\n") == 1  # host 0's rank 0 as is
    assert {event.rank for event in events.of(WorkerStarted)} == {0, 1}  # a worker row per host
    assert {event.rank for event in events.of(Heartbeat)} <= {0, 1} and events.of(Heartbeat)
    stops = {event.rank: event.step for event in events.of(Stopping)}
    assert set(stops) == {0, 1} and len(set(stops.values())) == 1, stops
    assert {event.reason for event in events.of(Stopping)} == {StopReason.DEADLINE}  # what each host's workers obeyed
    assert any("stop.partial" in " ".join(call) for call in pod_world.calls())
    assert wait_until(lambda: pod_world.live_processes() == [], 10), pod_world.live_processes()


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


def test_a_stalled_rank_on_one_host_gets_every_hosts_stacks_at_the_cell_line(pod: SimulatedSlice, tmp_path: Path) -> None:
    events = Events()
    asleep = TRAIN.replace('raise ValueError("bad shard on this host")', "time.sleep(600)")
    run = start_run(pod, tmp_path, asleep.format(steps=100_000, pause=0.05, failing_host="1"), events, watchdog=WatchdogSetting(3.0))
    try:
        started = time.monotonic()
        while not events.of(StackReport) and time.monotonic() - started < 120:
            run.poll()
        reported_after = time.monotonic() - started
        asked = run.stacks()  # from the thread that follows the run: it takes the hosts' answers itself
        answers: list[StackReport] = []
        helper = threading.Thread(target=lambda: answers.append(run.stacks()))  # as a background run's handle does
        helper.start()
        while helper.is_alive():
            run.poll()
        run.request_kill()
        follow(run)
    finally:
        run.close()
    [report] = events.of(StackReport)  # host 1's stall, said once, with both hosts' ranks
    assert reported_after < 60, reported_after
    assert report.reason.startswith("on host 1, rank 0's step has not moved for"), report.reason
    assert re.match(r"Rank 0 on host 1 \(step [23]\) is sleeping at In \[2\], line 10: time.sleep\(600\)", report.verdict), report.verdict
    stalled, moving = sorted(report.ranks, key=lambda place: -(place.host or 0))
    assert (stalled.host, stalled.rank) == (1, 0) and stalled.where == "In [2], line 10: time.sleep(600)"
    assert moving.host == 0 and moving.where is not None and moving.where.startswith("In [2], line ")
    assert report.unanswered == ()
    for on_demand in (asked, answers[0]):
        assert on_demand.reason == "asked for" and {place.host for place in on_demand.ranks} == {0, 1}
        assert "rank 0 on host 1" in on_demand.full_stacks()
    assert [stall.rank for stall in events.of(Stalled)] == [1]  # on host 1's row
    assert wait_until(lambda: pod.live_processes() == [], 10), pod.live_processes()
    with pytest.raises(RunEnded, match="the run has ended"):
        run.stacks()


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


def test_pod_launch_runs_a_function_after_the_prepared_cells_in_the_background(ip: InteractiveShell, one_host: SimulatedSlice) -> None:
    """`tpu_nb.pod.launch` takes what `%%tpu_train --pod` takes: `background`, `deadline` and `watchdog` too."""
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
            "job = tpu_nb.pod.launch(train, 'my-slice', returns=('model',), progress=False, background=True, deadline='1h', "
            "watchdog='off')\n"
            "job.wait(120)\n"
        )
    assert result.success, result.error_in_exec
    assert isinstance(result.result.value, float)
    weights = result.result.returned["model"]
    assert set(weights) == {"weight", "bias"} and isinstance(weights["weight"], torch.Tensor)
    assert ip.user_ns["job"].status == "done"
    assert one_host.live_processes() == []


def test_a_background_pod_run_leaves_the_notebook_free_and_stops_on_every_host(ip: InteractiveShell, pod: SimulatedSlice) -> None:
    with capture_output():
        assert ip.run_cell("%%tpu_prepare\n" + PREPARE).success
        before = ip.user_ns["model"].weight.detach().clone()
        train = TRAIN.format(steps=100_000, pause=0.05, failing_host="none")
        result = ip.run_cell(f"%%tpu_train --pod my-slice --background --name job --no-progress --return model\n{train}")
        assert result.success, result.error_in_exec
        job = ip.user_ns["job"]
        assert job.status == "running"
        wait_until(lambda: len(job.metrics) >= 3 or job.status != "running", STARTUP)
        assert len(job.metrics) >= 3, job.status
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


MESSY = r"""
import os, sys
import numpy as np
os.write(1, b"\xff\xfe not UTF-8 from a subprocess\n")
os.write(1, b'@tpu_nb {"host":Infinity,"origin":"","type":"Output","fields":{}}\n')
os.write(1, b'@tpu_nb {"host":0,"origin":"x","type":"Heartbeat","fields":{"rank":0,"step":1,"phase":"train","compile_count":1,"compile_seconds":0.5,"causes":[],"memory":[1],"cache":null}}\n')
print("训练损失下降 " * 3000)
sys.stdout.flush()
os.write(1, b"x" * 20_000_000 + b" the end of a 20 MB line\n")
for step in range(3):
    report(step=np.int64(step), loss=np.float32(0.5), max_steps=np.int32(3))
"done"
"""


def test_hosts_that_print_anything_or_cannot_tell_their_number_still_get_a_row_each_and_cannot_break_the_run(
    pod: SimulatedSlice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GCLOUD_NO_WORKER_ID", "1")  # every host says it is host 0
    events = Events()
    shown: list[str] = []
    run = start_run(pod, tmp_path, MESSY, events, write=lambda stream, text: shown.append(text))  # what the cell shows
    try:
        follow(run)
        ending = run.finish()
    finally:
        run.close()
    assert ending.status == "done", ending.text
    assert {event.rank for event in events.of(WorkerStarted)} == {0, 1}  # a row each
    assert ending.results[0].value == "done"
    text = "".join(shown)
    # Rank 0's print, whole, put together from its pieces; host 1's lines that only look like events may come in between.
    assert "训练损失下降 " * 3000 in "".join(piece for piece in shown if not piece.startswith("@tpu_nb "))
    assert '@tpu_nb {"host":Infinity' in text and '"memory":[1]' in text  # lines that only look like events are shown as they are
    assert "\xff" not in text and "not UTF-8 from a subprocess" not in text  # the host's raw output stays in the backend's lines
    assert [event.step for event in events.of(Progress) if event.step is not None][-1] == 2
    assert wait_until(lambda: pod.live_processes() == [], 10), pod.live_processes()


def test_a_run_still_running_on_the_slice_is_refused_with_its_command_or_ended_on_request(
    ip: InteractiveShell, pod: SimulatedSlice
) -> None:
    stale = pod.home(1) / "tpu_nb_runs" / "my-slice-1201-101010"
    stale.mkdir(parents=True)
    left = subprocess.Popen(["sleep", "600"], cwd=stale, start_new_session=True)  # a host's train.py, its kernel gone
    started = SystemView.current().process_start_ticks(left.pid)
    assert started is not None
    write_group(stale, left.pid, started)
    try:
        result, _ = run_cell(ip, "%%tpu_train --pod my-slice --no-progress\n1")
        message = str(result.error_in_exec)
        assert isinstance(result.error_in_exec, LaunchRefused)
        assert "a tpu_nb run is still running on my-slice: my-slice-1201-101010" in message
        assert "gcloud compute tpus tpu-vm ssh my-slice --worker=all '--command={ cd tpu_nb_runs/my-slice-1201-101010" in message
        assert "--kill-stale" in message and left.poll() is None
        assert not any("scp" in call for call in pod.calls())  # nothing was copied
        result, captured = run_cell(ip, "%%tpu_train --pod my-slice --no-progress --kill-stale\n1 + 1")
        assert result.success and result.result == 2, result.error_in_exec
        assert "ended the run my-slice-1201-101010 that was still running on my-slice (--kill-stale)" in captured.stderr
        assert wait_until(lambda: left.poll() is not None, 10)
    finally:
        left.kill()
        left.wait()


def test_ending_a_run_signals_no_group_its_file_no_longer_names_and_says_so(pod: SimulatedSlice) -> None:
    stale = pod.home(1) / "tpu_nb_runs" / "my-slice-1201-101010"
    stale.mkdir(parents=True)
    someone_elses = subprocess.Popen(["sleep", "600"], start_new_session=True)  # leads the group whose id the file holds
    started = SystemView.current().process_start_ticks(someone_elses.pid)
    assert started is not None
    write_group(stale, someone_elses.pid, started - 100)  # written by the run's leader, which had that pid before
    try:
        said = TpuVmSlice(pod.name).end("my-slice-1201-101010")  # what --kill-stale and Kill run
        assert someone_elses.poll() is None  # never signalled
    finally:
        someone_elses.kill()
        someone_elses.wait()
    assert said.startswith(f"tpu_nb: host.pgid in {stale} on ")
    assert said.endswith(
        f"names process group {someone_elses.pid}, which is no longer this run (its leader has exited, or its pid now belongs to another process): nothing was signalled."
    )
    assert len(said.splitlines()) == 1  # host 0 has no such run: nothing to say


@pytest.mark.parametrize("name", ["x;id>pwned;", "../outside", "a/b", "My-Slice", "-dash", "x" * 64, "ends-"])
@pytest.mark.parametrize("backend", ["gcloud", "export", "gke"])
def test_a_hostile_or_bad_pod_name_is_refused_before_anything_is_written(
    ip: InteractiveShell, pod: SimulatedSlice, tmp_path: Path, name: str, backend: str
) -> None:
    extra = " --image example.com/xla --accelerator v4-16 --run-dir gs://bucket/runs" if backend == "gke" else ""
    result, _ = run_cell(ip, f"%%tpu_train --pod={shlex.quote(name)} --backend {backend}{extra} --no-progress\n1")
    assert isinstance(result.error_in_exec, LaunchRefused), result.error_in_exec
    assert "a TPU VM's name is 1 to 63 lower-case letters, digits and '-'" in str(result.error_in_exec)
    assert not (tmp_path / "tpu_nb_pod_runs").exists() and not (tmp_path / "pwned").exists()
    assert pod.calls() == []  # not even a check ran


def test_a_gs_run_leaves_no_local_copy(
    ip: InteractiveShell, one_host: SimulatedSlice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A temporary directory of this test's own: other tests' pod runs (other xdist workers) make theirs meanwhile.
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    result, _ = run_cell(ip, f"%%tpu_train --pod my-slice --run-dir file://{tmp_path}/bucket --no-progress\n'from the bucket'")
    assert result.success and result.result == "from the bucket", result.error_in_exec
    assert not list((tmp_path / "tmp").glob("tpu_nb-pod-*"))
    assert not (tmp_path / "tpu_nb_pod_runs").exists()
    [copied] = (tmp_path / "bucket").iterdir()
    assert (copied / "train.py").exists() and (copied / "results" / "result-0.json").exists()


def test_a_host_that_answers_the_checks_with_garbage_is_refused_in_one_message(
    ip: InteractiveShell, pod: SimulatedSlice, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GCLOUD_SAYS", '@tpu_nb-versions {"host": "w-0", "torch": ')  # cut short on the way
    result, _ = run_cell(ip, "%%tpu_train --pod my-slice --no-progress\n1")
    assert isinstance(result.error_in_exec, LaunchRefused), result.error_in_exec
    assert "checking the slice failed: Expecting value" in str(result.error_in_exec)


def test_a_host_that_dies_after_a_20_mb_line_fails_the_run_with_a_short_message(one_host: SimulatedSlice, tmp_path: Path) -> None:
    dying = 'import os, signal\nos.write(2, b"y" * 20_000_000 + b" last words\\n")\nos.kill(os.getppid(), signal.SIGKILL)  # the host\'s train.py'
    run = start_run(one_host, tmp_path, dying, Events())
    try:
        follow(run)
        ending = run.finish()
    finally:
        run.close()
    assert ending.status == "failed" and ending.text is not None
    assert "ended without a word" in ending.text and "bytes skipped" in ending.text and "last words" in ending.text
    assert len(ending.text) < 10_000
