"""Small filesystems for tests: tmpfs mounts in a private mount namespace (`unshare -m`, root only).

A container's /dev/shm is often 64 MB and disks fill up; this is how the
tests give a process exactly that, without touching the machine's mounts.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest


@functools.cache
def mounts_possible() -> str | None:
    """None when private tmpfs mounts work here, else why not."""
    if os.geteuid() != 0:
        return "needs root for a private mount namespace (unshare -m), as CI has"
    try:
        done = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True, timeout=30)
    except FileNotFoundError:
        return "needs util-linux's unshare"
    return None if done.returncode == 0 else f"unshare -m cannot mount here: {done.stderr.decode(errors='replace').strip()}"


def mounting(mounts: Mapping[Path, str]) -> str:
    """Shell text that mounts a tmpfs of each size at each path (created first)."""
    return " && ".join(
        f"mkdir -p {shlex.quote(str(path))} && mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(path))}"
        for path, size in mounts.items()
    )


def in_namespace(mounts: Mapping[Path, str], argv: Sequence[str]) -> list[str]:
    """`argv` run with the mounts in place, seen by it and its children only; skips the test where that cannot be."""
    reason = mounts_possible()
    if reason is not None:
        pytest.skip(reason)
    return ["unshare", "-m", "sh", "-c", f"{mounting(mounts)} && exec {shlex.join(argv)}"]


def run_with_small_mounts(mounts: Mapping[Path, str], argv: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(in_namespace(mounts, argv), capture_output=True, text=True, timeout=timeout)
