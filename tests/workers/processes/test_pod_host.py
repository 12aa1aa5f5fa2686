"""A pod host's part: which host it is, and refusing to start with other versions than the notebook's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tpu_nb.kernel.pod.program import PodProgram, write_run_directory
from tpu_nb.wire.events import Notice
from tpu_nb.wire.host_lines import HostEnded, decode
from tpu_nb.wire.run_directory import Cell
from tpu_nb.workers.processes.pod_host import host_index


def test_the_host_index_comes_from_gke_or_the_tpu_vm() -> None:
    assert host_index({"TPU_WORKER_ID": "3"}) == 3
    assert host_index({"CLOUD_TPU_TASK_ID": "1"}) == 1
    assert host_index({"PJRT_DEVICE": "CPU"}) == 0


def test_a_host_with_other_versions_refuses_before_running_anything(tmp_path: Path) -> None:
    program = PodProgram((Cell("In [1]", "%%tpu_prepare", "open('ran', 'w')"),), Cell("In [2]", "%%tpu_train --pod x", "1"))
    run = write_run_directory(program, tmp_path / "run", "run", hosts=2, devices=8)
    manifest = json.loads((run.path / "manifest.json").read_text())
    manifest["notebook"]["packages"]["torch"] = "1.0.0"
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=run.path, env={**os.environ, "TPU_WORKER_ID": "1"}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3
    [line] = [decode(line) for line in done.stdout.splitlines()]
    assert line.host == 1 and isinstance(line.event, HostEnded) and line.event.status == "refused"
    assert line.event.detail is not None and "host 1 has torch" in line.event.detail and "pip install torch==1.0.0" in line.event.detail
    assert not (run.path / "ran").exists()


def test_results_that_cannot_reach_the_runs_location_fail_the_host_with_the_reason(tmp_path: Path) -> None:
    program = PodProgram((), Cell("In [1]", "%%tpu_train --pod x", "41 + 1"))
    run = write_run_directory(program, tmp_path / "run", "run", hosts=1, devices=1, run_url="nosuchfs://bucket/run")
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=run.path, env={**os.environ, "PJRT_DEVICE": "CPU"}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    ended = decode(done.stdout.splitlines()[-1]).event
    assert isinstance(ended, HostEnded) and ended.status == "died"
    assert ended.detail is not None and "could not save the results to nosuchfs://bucket/run/results" in ended.detail


WATCHER = """
import os, sys, threading, time
from pathlib import Path
from tpu_nb.wire.host_lines import LineWriter
from tpu_nb.wire.shared_memory_stop import StopRequest
from tpu_nb.workers.processes.pod_host import _watch_requests
run_dir = Path(sys.argv[1])
(run_dir / "results").mkdir()
stop = StopRequest(1)
threading.Thread(target=_watch_requests, args=(run_dir, stop, LineWriter(1, 0)), daemon=True).start()
(run_dir / "stacks-request").write_bytes(b"\\xff\\xfe garbage")  # not text: reading it raises
time.sleep(1.0)
(run_dir / "stop").write_text("7")
deadline = time.monotonic() + 10
while not stop.requested and time.monotonic() < deadline:
    time.sleep(0.05)
print("STOP", stop.requested, stop.stop_step, flush=True)
"""


def test_a_request_the_host_cannot_read_is_said_once_and_stops_still_arrive(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", WATCHER, str(tmp_path)], capture_output=True, text=True, timeout=120)

    assert "STOP True 7" in done.stdout, done.stdout + done.stderr
    notices = [line.event for line in map(decode, done.stdout.splitlines()) if isinstance(line.event, Notice)]
    [notice] = notices  # said once, not at every poll
    assert notice.text.startswith("host 0: answering a stacks request failed (UnicodeDecodeError: ")
    assert notice.text.endswith("it goes on watching for the notebook's requests")
