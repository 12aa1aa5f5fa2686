"""What a dead kernel left (its runs' private directories) is removed by the next directory made."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tpu_nb.kernel.run.leftovers import private_directory


def a_dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_new_directory_is_private_and_named_with_this_kernels_pid(tmp_path: Path) -> None:
    made = private_directory("results", tmp_path)
    assert made.parent == tmp_path and made.name.startswith(f"tpu_nb-results-{os.getpid()}-")
    assert made.stat().st_mode & 0o777 == 0o700 and not any(made.iterdir())


def test_what_a_dead_kernel_left_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = a_dead_pid()
    left = [tmp_path / f"tpu_nb-{dead}-abc", tmp_path / f"tpu_nb-results-{dead}-def", tmp_path / f"tpu_nb-pod-{dead}-ghi"]
    kept = [tmp_path / f"tpu_nb-{os.getpid()}-live", tmp_path / "tpu_nb-no-pid-here", tmp_path / "other-1-x"]
    for path in left + kept:
        path.mkdir()
        (path / "result-0.pt").write_bytes(b"x")
    private_directory("", tmp_path)
    assert [path for path in left if path.exists()] == []
    assert all(path.exists() for path in kept)
