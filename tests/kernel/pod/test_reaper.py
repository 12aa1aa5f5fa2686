"""The reaper: when the kernel that follows a pod run dies, it ends the run's local commands and runs the end commands."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from support.processes import wait_until

from tpu_nb.kernel.pod.reaper import Reaper


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_kernel_that_dies_leaves_its_run_to_the_reaper(tmp_path: Path) -> None:
    ended = tmp_path / "ended-everywhere"
    local_copy = tmp_path / "tpu_nb-pod-1-x"
    local_copy.mkdir()
    read_fd, write_fd = os.pipe()
    kernel = os.fork()
    if kernel == 0:  # the kernel: starts the reaper and the backend's command, then dies without a word
        try:
            reaper = Reaper.start([["touch", str(ended)]], remove=[str(local_copy)])
            command = subprocess.Popen(["sleep", "600"], start_new_session=True)
            reaper.watch_group(command.pid)
            os.write(write_fd, f"{reaper.pid} {command.pid}\n".encode())
            signal.pause()
        finally:
            os._exit(0)
    reaper_pid, command_pid = map(int, os.read(read_fd, 100).split())
    assert alive(command_pid) and not ended.exists()
    os.kill(kernel, signal.SIGKILL)
    os.waitpid(kernel, 0)
    assert wait_until(lambda: ended.exists(), 30)  # the commands that end the run everywhere ran
    assert wait_until(lambda: not alive(command_pid), 10)  # and the local command's group was ended
    assert wait_until(lambda: not local_copy.exists(), 10)  # and the run's local copy removed
    assert wait_until(lambda: not alive(reaper_pid), 10)


def test_a_run_that_ended_releases_its_reaper_without_running_anything(tmp_path: Path) -> None:
    ended = tmp_path / "ended-everywhere"
    reaper = Reaper.start([["touch", str(ended)]])
    command = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        reaper.watch_group(command.pid)
        reaper.release()
        assert not alive(reaper.pid) and not ended.exists() and alive(command.pid)
    finally:
        command.kill()
        command.wait()


def test_the_reaper_is_out_of_the_kernels_way() -> None:
    reaper = Reaper.start([])
    try:
        assert os.getsid(reaper.pid) == reaper.pid  # its own session: a restart's signal to the kernel's group misses it
    finally:
        reaper.release()
