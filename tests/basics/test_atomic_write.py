"""A small file is written whole or not at all: a partial file never stands in its place, nor outlives a failed write."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support.mounts import run_with_small_mounts

from tpu_nb.basics.atomic_write import write_atomically


def test_the_file_is_replaced_whole_and_no_partial_is_left(tmp_path: Path) -> None:
    path = tmp_path / "result-0.json"
    path.write_bytes(b"old")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new" and [item.name for item in tmp_path.iterdir()] == ["result-0.json"]


# In a 16 KiB tmpfs: an old file, then a write three times the room left, which fails midway.
FILL_THE_DISK = """
import json, os, sys
from pathlib import Path
from tpu_nb.basics.atomic_write import write_atomically
path = Path(sys.argv[1]) / "sweep.json"
path.write_bytes(b"old")
try:
    write_atomically(path, b"x" * 48 * 1024)
    said = None
except OSError as error:
    said = error.strerror
print(json.dumps({"said": said, "old": path.read_text(), "names": sorted(os.listdir(path.parent))}))
"""


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_partial(tmp_path: Path) -> None:
    small = tmp_path / "small"
    done = run_with_small_mounts({small: "16k"}, [sys.executable, "-c", FILL_THE_DISK, str(small)], timeout=60)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {"said": "No space left on device", "old": "old", "names": ["sweep.json"]}  # no partial left filling the disk


def test_two_names_that_differ_only_in_their_suffix_never_share_a_partial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partials: list[str] = []
    real_replace = os.replace

    def seen(source: str | Path, destination: str | Path) -> None:
        partials.append(Path(source).name)
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", seen)
    write_atomically(tmp_path / "a.json", b"1")
    write_atomically(tmp_path / "a.txt", b"2")
    assert partials == ["a.json.partial", "a.txt.partial"]  # not one a.partial for both


def test_the_data_is_on_disk_before_the_rename_and_the_rename_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A crash of the machine after the rename but before the data reached the disk leaves an empty file in the name's place.
    happened: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        real_fsync(fd)
        happened.append("fsync " + ("directory" if os.path.isdir(f"/proc/self/fd/{fd}") else os.readlink(f"/proc/self/fd/{fd}")))

    def replace(source: str | Path, destination: str | Path) -> None:
        real_replace(source, destination)
        happened.append("rename")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomically(tmp_path / "result-0.json", b"{}")
    assert happened == [f"fsync {tmp_path / 'result-0.json.partial'}", "rename", "fsync directory"]
