"""A pod run's directory, both directions: what the notebook writes is what a host reads."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from support.processes import wait_until

from tpu_nb.wire.mesh import MeshShape
from tpu_nb.wire.run_directory import (
    GROUP_FILE,
    STACKS_REQUEST_FILE,
    STOP_FILE,
    Manifest,
    download_results,
    forget_group,
    kill_shell,
    read_stacks_request,
    read_stop,
    request_shell,
    stop_text,
    upload,
    write_group,
)
from tpu_nb.wire.stacks import WatchdogSetting
from tpu_nb.wire.stop_reason import StopReason


def test_the_manifest_reads_back_as_written(tmp_path: Path) -> None:
    for watchdog in (WatchdogSetting(), WatchdogSetting(90.0), None):  # learned, fixed, off
        manifest = Manifest(
            "run-1",
            2,
            8,
            ("model",),
            MeshShape.parse("fsdp=8"),
            True,
            None,
            watchdog,
            "gs://b/run-1",
            "3.13.5",
            {"torch": "2.9.0+cpu", "peft": None},
        )
        manifest.write(tmp_path)
        assert Manifest.read(tmp_path) == manifest


def test_a_stop_written_by_the_shell_text_is_read_by_the_host_with_its_reason(tmp_path: Path) -> None:
    assert read_stop(tmp_path) == (None, None)
    subprocess.run(["sh", "-c", request_shell(str(tmp_path), STOP_FILE, stop_text(17, StopReason.DEADLINE))], check=True)
    assert read_stop(tmp_path) == (StopReason.DEADLINE, 17)
    subprocess.run(["sh", "-c", request_shell(str(tmp_path), STOP_FILE, stop_text(None, StopReason.USER))], check=True)
    assert read_stop(tmp_path) == (StopReason.USER, None)  # no step known: each host's own next one
    assert not list(tmp_path.glob("*.partial"))


def test_a_stacks_request_written_by_the_shell_text_is_read_by_the_host_by_its_number(tmp_path: Path) -> None:
    assert read_stacks_request(tmp_path) is None
    for number in (1, 2):
        subprocess.run(["sh", "-c", request_shell(str(tmp_path), STACKS_REQUEST_FILE, str(number))], check=True)
        assert read_stacks_request(tmp_path) == number
    assert read_stop(tmp_path) == (None, None)  # a stacks request is no stop


def start_ticks(pid: int) -> int:
    """When process `pid` started, in clock ticks after boot (/proc/PID/stat's field 22), as a host reads it."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_the_kill_text_ends_the_process_group_the_host_wrote(tmp_path: Path) -> None:
    group = subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600; wait"], start_new_session=True)
    write_group(tmp_path, group.pid, start_ticks(group.pid))
    assert (tmp_path / GROUP_FILE).read_text() == f"{group.pid} {start_ticks(group.pid)}\n"
    said = subprocess.run(["sh", "-c", kill_shell(str(tmp_path))], check=True, timeout=30, capture_output=True, text=True)
    assert wait_until(lambda: group.poll() is not None, 10)
    assert group.returncode == -signal.SIGTERM and said.stdout == ""
    subprocess.run(["sh", "-c", kill_shell(str(tmp_path / "no-such-run"))], check=True)  # nothing there: nothing to do
    forget_group(tmp_path)
    assert not (tmp_path / GROUP_FILE).exists()


def test_a_group_file_that_outlived_its_host_signals_nobody_and_says_so(tmp_path: Path) -> None:
    # The run's leader had this pid once; now it leads someone else's process group (a pid goes round once its process is gone).
    someone_elses = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        (tmp_path / GROUP_FILE).write_text(f"{someone_elses.pid} {start_ticks(someone_elses.pid) - 100}\n")
        said = subprocess.run(["sh", "-c", kill_shell(str(tmp_path))], check=True, timeout=30, capture_output=True, text=True)
        assert someone_elses.poll() is None  # not signalled
        assert said.stdout.startswith(f"tpu_nb: {GROUP_FILE} in {tmp_path} on ")
        assert said.stdout.rstrip().endswith(
            f"names process group {someone_elses.pid}, which is no longer this run (its leader has exited, or its pid now "
            "belongs to another process): nothing was signalled."
        )
    finally:
        someone_elses.kill()
        someone_elses.wait()
    (tmp_path / GROUP_FILE).write_text("-1 5\n")  # no group a run leads: never `kill -TERM --1`
    said = subprocess.run(["sh", "-c", kill_shell(str(tmp_path))], check=True, timeout=30, capture_output=True, text=True)
    assert "names process group 0, which is no longer this run" in said.stdout


def test_a_directory_travels_to_a_url_and_its_results_back(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    (run / "train.py").write_text("print(1)")
    (run / "results" / "result-0.json").write_text("{}")
    upload(run, f"file://{tmp_path}/bucket/run")
    assert (tmp_path / "bucket" / "run" / "train.py").read_text() == "print(1)"
    fetched = download_results(f"file://{tmp_path}/bucket/run", tmp_path / "back")
    assert sorted(os.listdir(fetched)) == ["result-0.json"]
