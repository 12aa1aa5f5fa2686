"""Pod runs on a simulated GKE cluster: the fake kubectl runs the applied JobSet's pods as local processes.

The results travel through a `file://` location standing in for gs:// (the
same fsspec calls; gcsfs is what a real bucket needs).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
import torch
import yaml
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.pods import SimulatedCluster, simulate_gke
from support.processes import STARTUP, wait_until

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused, TrainingInterrupted

PREPARE = """%%tpu_prepare
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
data = torch.randn(32, 4)
"""

TRAIN = """
import torch_xla
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    loss = model(data.to(device)).pow(2).mean()
    loss.backward(); optimizer.step(); optimizer.zero_grad(); torch_xla.sync()
    report(step=step, loss=loss)
round(float(loss), 6)
"""


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedCluster:
    monkeypatch.chdir(tmp_path)
    return simulate_gke(monkeypatch, tmp_path / "cluster", nodes=2)


def test_a_gke_run_applies_a_jobset_follows_its_pods_fetches_the_results_and_deletes_it(
    ip: InteractiveShell, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    bucket = tmp_path / "bucket"
    with capture_output():
        assert ip.run_cell(PREPARE).success
        before = ip.user_ns["model"].weight.detach().clone()
        magic = f"%%tpu_train --pod tiny --image example.com/torch-xla:2.9 --accelerator v4-16 --run-dir file://{bucket} --no-progress --return model"
        result = ip.run_cell(magic + TRAIN)
    assert result.success, result.error_in_exec
    assert isinstance(result.result, float)
    assert not torch.equal(ip.user_ns["model"].weight, before)

    applied = list(yaml.safe_load_all((cluster.root / "applied.yaml").read_text()))
    jobset = next(item for item in applied if item["kind"] == "JobSet")
    name = jobset["metadata"]["name"]
    assert name.startswith("tiny-")
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == 2  # a v4-16 is 2 hosts of 4 chips
    assert [results.name for results in (bucket / name / "results").iterdir()]  # host 0 saved them at the run's location
    verbs = [call[:2] for call in cluster.calls()]
    assert verbs[:4] == [["auth", "can-i"], ["get", "nodes"], ["get", "jobsets"], ["apply", "-f"]] and ["logs", "--follow"] in verbs
    assert any(call[:3] == ["delete", "jobset", name] for call in cluster.calls())
    assert any(call[:3] == ["delete", "configmap", f"{name}-run"] for call in cluster.calls())
    assert cluster.objects() == []  # nothing left in the cluster
    assert wait_until(lambda: cluster.live_processes() == [], 10)


def test_refused_when_the_cluster_lacks_the_nodes_or_the_run_a_bucket(
    ip: InteractiveShell, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    magic = "%%tpu_train --pod tiny --image example.com/torch-xla:2.9 --accelerator v4-16 --no-progress"
    with capture_output():
        result = ip.run_cell(f"{magic} --run-dir local-dir\n1")
    assert isinstance(result.error_in_exec, LaunchRefused) and "--run-dir gs://BUCKET/PATH" in str(result.error_in_exec)
    monkeypatch.setenv("FAKE_KUBECTL_NODES", "1")
    with capture_output():
        result = ip.run_cell(f"{magic} --run-dir file://{tmp_path}/bucket\n1")
    assert isinstance(result.error_in_exec, LaunchRefused)
    assert "the cluster has 1 nodes with tpu-v4-podslice in topology 2x2x2; a v4-16 needs 2" in str(result.error_in_exec)
    assert not any(call[0] == "apply" for call in cluster.calls())


def test_a_graceful_stop_reaches_every_pod_through_kubectl_exec(cluster: SimulatedCluster, tmp_path: Path) -> None:
    from tpu_nb.kernel.planning.options import LaunchOptions
    from tpu_nb.kernel.pod.backends.gke import GkeSlice
    from tpu_nb.kernel.pod.backends.slices import parse_slice
    from tpu_nb.kernel.pod.pod_run import PodRun
    from tpu_nb.kernel.pod.program import PodProgram, write_run_directory
    from tpu_nb.wire.events import Event, Progress, Stopping
    from tpu_nb.wire.run_directory import Cell

    endless = TRAIN.replace("range(10)", "range(100_000)").replace("    report(", "    __import__('time').sleep(0.05)\n    report(")
    program = PodProgram(
        (Cell("In [1]", "%%tpu_prepare", PREPARE.removeprefix("%%tpu_prepare\n")),), Cell("In [2]", "%%tpu_train", endless), ("model",)
    )
    run_dir = write_run_directory(
        program, tmp_path / "runs" / "stop-1", "stop-1", hosts=2, devices=8, run_url=f"file://{tmp_path}/bucket/stop-1"
    )
    events: list[Event] = []
    gke = GkeSlice(parse_slice("v4-16"), "example.com/torch-xla:2.9")
    run = PodRun(
        gke,
        run_dir,
        LaunchOptions(progress=False),
        "test",
        write=lambda stream, text: None,
        observers=[type("Log", (), {"on_event": staticmethod(events.append)})()],
    )
    run.start()
    try:
        while not any(isinstance(event, Progress) and (event.step or 0) >= 5 for event in events):
            run.poll()
        run.request_stop()
        while not run.ended:
            run.poll()
        ending = run.finish()
    finally:
        run.close()
    assert ending.status == "stopped", ending.text
    assert "model" in ending.results[0].returned  # fetched from the run's location (file:// standing in for gs://)
    assert {event.rank for event in events if isinstance(event, Stopping)} == {0, 1}
    execs = [call for call in cluster.calls() if call[0] == "exec"]
    assert len(execs) == 2 and all("stop.partial" in call[-1] for call in execs)
    assert wait_until(lambda: cluster.live_processes() == [], 10)


def test_pods_that_never_start_are_deleted(
    ip: InteractiveShell, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("tpu_nb.kernel.pod.backends.gke.PODS_TIMEOUT", 3.0)
    monkeypatch.setenv("FAKE_KUBECTL_PENDING", "1")
    with capture_output():
        result = ip.run_cell(
            f"%%tpu_train --pod tiny --image example.com/xla --accelerator v4-16 --run-dir file://{tmp_path}/b --no-progress\n1"
        )
    assert isinstance(result.error_in_exec, LaunchRefused) and "did not start within 3s" in str(result.error_in_exec)
    assert any(call[:2] == ["delete", "jobset"] for call in cluster.calls())
    assert wait_until(lambda: cluster.live_processes() == [], 10)


def test_refused_without_an_image_an_accelerator_or_a_cluster_that_allows_jobsets(
    ip: InteractiveShell, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with capture_output():
        result = ip.run_cell(f"%%tpu_train --pod tiny --backend gke --run-dir file://{tmp_path}/b --no-progress\n1")
    message = str(result.error_in_exec)
    assert "--backend gke needs --image IMAGE" in message and "--backend gke needs --accelerator TYPE" in message
    monkeypatch.setenv("FAKE_KUBECTL_CAN_I", "no")
    with capture_output():
        result = ip.run_cell(
            f"%%tpu_train --pod tiny --image example.com/xla --accelerator v4-16 --run-dir file://{tmp_path}/b --no-progress\n1"
        )
    assert "kubectl may not create JobSets in namespace default (it said 'no')" in str(result.error_in_exec)
    with capture_output():
        result = ip.run_cell(f"%%tpu_train --pod Bad_Name --image example.com/xla --accelerator v4-16 --run-dir file://{tmp_path}/b\n1")
    assert "--pod 'Bad_Name': a TPU VM's name is 1 to 63 lower-case letters, digits and '-'" in str(result.error_in_exec)
    long_name = "a" * 45  # a TPU VM's name, too long for a JobSet's pods
    with capture_output():
        result = ip.run_cell(f"%%tpu_train --pod {long_name} --image example.com/xla --accelerator v4-16 --run-dir file://{tmp_path}/b\n1")
    assert f"--pod {long_name}: '{long_name}' cannot name a JobSet" in str(result.error_in_exec)
    assert not any(call[0] == "apply" for call in cluster.calls())


GKE_RUN = "%%tpu_train --pod tiny --image example.com/xla --accelerator v4-16 --run-dir file://{bucket} --no-progress\n1"


def test_an_apply_that_fails_half_way_leaves_nothing_in_the_cluster(
    ip: InteractiveShell, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_KUBECTL_APPLY", "fail")  # the ConfigMap is created, the JobSet refused
    with capture_output():
        result = ip.run_cell(GKE_RUN.format(bucket=tmp_path / "b"))
    assert isinstance(result.error_in_exec, LaunchRefused)
    assert "admission webhook denied the request" in str(result.error_in_exec)  # kubectl's own words
    assert any(call[:2] == ["delete", "configmap"] for call in cluster.calls())
    assert cluster.objects() == []


def test_an_apply_that_is_interrupted_leaves_nothing_in_the_cluster(
    ip: InteractiveShell, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_KUBECTL_APPLY", "hang")  # the ConfigMap is created, then kubectl hangs
    interrupt_when_applying = threading.Thread(
        target=lambda: (
            wait_until(lambda: cluster.objects() != [], STARTUP) and signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        )
    )
    interrupt_when_applying.start()
    with capture_output():
        result = ip.run_cell(GKE_RUN.format(bucket=tmp_path / "b"))
    interrupt_when_applying.join()
    assert isinstance(result.error_in_exec, TrainingInterrupted), result.error_in_exec
    assert "nothing it had created is left" in str(result.error_in_exec)
    assert cluster.objects() == []
    assert wait_until(lambda: cluster.live_processes() == [], 10)


def test_a_run_left_in_the_cluster_is_named_with_its_commands_or_ended_on_request(
    ip: InteractiveShell, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    (cluster.root / "objects").mkdir(exist_ok=True)
    (cluster.root / "objects" / "jobset-tiny-1201-101010").write_text("")  # left by a kernel that was SIGKILLed
    with capture_output():
        result = ip.run_cell(GKE_RUN.format(bucket=tmp_path / "b"))
    message = str(result.error_in_exec)
    assert isinstance(result.error_in_exec, LaunchRefused)
    assert "a tpu_nb run is still running on tiny: tiny-1201-101010" in message
    assert "kubectl --namespace=default delete jobset tiny-1201-101010 --ignore-not-found --wait=false" in message
    assert "--kill-stale" in message
    assert not any(call[0] == "apply" for call in cluster.calls())
    with capture_output() as captured:
        result = ip.run_cell(GKE_RUN.format(bucket=tmp_path / "b").replace("--no-progress", "--no-progress --kill-stale"))
    assert result.success, result.error_in_exec
    assert "tpu_nb: ended the run tiny-1201-101010 that was still running on tiny (--kill-stale)." in captured.stderr
    assert cluster.objects() == []


def test_kubectl_that_fails_in_the_checks_is_refused_in_its_own_words(
    ip: InteractiveShell, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_KUBECTL_FAIL", "get nodes")
    with capture_output():
        result = ip.run_cell(GKE_RUN.format(bucket=tmp_path / "b"))
    assert isinstance(result.error_in_exec, LaunchRefused)
    assert "checking the slice failed: `kubectl --namespace=default get nodes" in str(result.error_in_exec)
    assert "Unable to connect to the server: \ufffd" in str(result.error_in_exec)  # its words, even not in UTF-8
