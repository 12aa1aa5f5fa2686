"""A small file is written whole or not at all: a partial file never stands in its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpu_nb.wire.atomic_write import write_atomically


def test_the_file_is_replaced_whole_and_no_partial_is_left(tmp_path: Path) -> None:
    path = tmp_path / "result-0.json"
    path.write_bytes(b"old")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new" and [item.name for item in tmp_path.iterdir()] == ["result-0.json"]


def test_a_write_that_fails_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "supervisor.pkl"
    path.write_bytes(b"old")

    def no_space(self: Path, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", no_space)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, b"new")
    assert path.read_bytes() == b"old"
