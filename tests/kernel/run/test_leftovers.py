"""What a dead kernel left (its runs' private directories) is removed by the next directory made, and nothing else is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpu_nb.basics.owners import Owner, this_process
from tpu_nb.kernel.run.leftovers import private_directory


def a_dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def me() -> Owner:
    owner = this_process()
    assert owner is not None, "this machine's /proc names this process, its boot and its pid namespace"
    return owner


def made(directory: Path, name: str) -> Path:
    path = directory / name
    path.mkdir()
    (path / "result-0.pt").write_bytes(b"x")
    return path


def test_a_new_directory_is_private_and_named_with_this_process_its_start_and_where_its_pid_counts(tmp_path: Path) -> None:
    owner = me()
    directory = private_directory("results", tmp_path)
    assert directory.parent == tmp_path and directory.name.startswith(f"tpu_nb-results-{os.getpid()}-{owner.started}-{owner.place}-")
    assert directory.stat().st_mode & 0o777 == 0o700 and not any(directory.iterdir())


def test_what_a_dead_kernel_left_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    owner, dead = me(), a_dead_pid()
    left = [
        made(tmp_path, f"tpu_nb-{dead}-{owner.started}-{owner.place}-abc"),
        made(tmp_path, f"tpu_nb-results-{dead}-{owner.started}-{owner.place}-def"),
        # A kernel that had this process's pid before it (a pid goes to a new process once the old one is gone).
        made(tmp_path, f"tpu_nb-pod-{os.getpid()}-{owner.started - 1}-{owner.place}-ghi"),
    ]
    kept = [
        made(tmp_path, f"tpu_nb-{os.getpid()}-{owner.started}-{owner.place}-live"),
        made(tmp_path, "tpu_nb-no-pid-here"),
        made(tmp_path, "other-1-x"),
    ]
    private_directory("", tmp_path)
    assert [path for path in left if path.exists()] == []
    assert all(path.exists() for path in kept)


def test_a_random_suffix_is_never_read_as_a_pid(tmp_path: Path) -> None:
    # tempfile's names: the selftest's scratch and a pod run's local copy, whose random letters can all be digits.
    kept = [made(tmp_path, f"tpu_nb-selftest-{a_dead_pid()}"), made(tmp_path, f"tpu_nb-pod-{a_dead_pid()}"), made(tmp_path, "tpu_nb-4242")]
    private_directory("", tmp_path)
    assert all(path.exists() for path in kept)


def test_a_directory_of_another_pid_namespace_or_boot_is_left_whatever_its_pid_is_here(tmp_path: Path) -> None:
    # A /dev/shm shared between containers: another container's pid means nothing here, alive or not.
    owner, dead = me(), a_dead_pid()
    theirs = [
        made(tmp_path, f"tpu_nb-results-{dead}-{owner.started}-0123456789ab-abc"),
        made(tmp_path, f"tpu_nb-{os.getpid()}-{owner.started - 1}-0123456789ab-def"),
    ]
    private_directory("", tmp_path)
    assert all(path.exists() for path in theirs)


OTHER_CONTAINER = """
import sys, time
from pathlib import Path
from tpu_nb.kernel.run.leftovers import private_directory
print(private_directory("results", Path(sys.argv[1])).name, flush=True)
time.sleep(60)
"""


def test_a_live_run_in_another_pid_namespace_keeps_its_directory(tmp_path: Path) -> None:
    if os.geteuid() != 0 or subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True).returncode:
        pytest.skip("needs root and util-linux's unshare for a pid namespace of its own, as CI has")
    # Its own pid namespace (as another container has), sharing this directory: its pids are not this namespace's.
    other = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, "-c", OTHER_CONTAINER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        theirs = tmp_path / other.stdout.readline().strip()
        assert theirs.is_dir() and theirs.name.startswith("tpu_nb-results-")
        private_directory("", tmp_path)
        assert theirs.is_dir()  # its run goes on with its files
    finally:
        other.kill()
        other.wait(30)
        assert other.stdout is not None
        other.stdout.close()
