"""A checkpoint's directory: staged then renamed, uploaded record last, copied back, pruned; nothing left when a write fails."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from tpu_nb.wire.checkpoints import RECORD
from tpu_nb.workers.checkpoint_files import Staged, is_remote, local_copy, trainer_directory


def test_a_checkpoint_is_staged_as_partial_and_renamed_when_written(tmp_path: Path) -> None:
    with Staged(str(tmp_path / "run"), 7) as staging:
        assert staging == tmp_path / "run" / "checkpoint-7.partial"
        (staging / "state.pt").write_bytes(b"state")
        assert not (tmp_path / "run" / "checkpoint-7").exists()  # never looks like a checkpoint while written
    assert (tmp_path / "run" / "checkpoint-7" / "state.pt").read_bytes() == b"state"
    assert not (tmp_path / "run" / "checkpoint-7.partial").exists()


def test_a_write_that_fails_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(OSError), Staged(str(tmp_path), 3) as staging:
        (staging / "state.pt").write_bytes(b"half")
        raise OSError(28, "No space left on device")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OSError), Staged("memory://failing/run", 3) as staging:
        remote_staging = staging
        raise OSError(28, "No space left on device")
    assert not remote_staging.parent.exists() and not fsspec.filesystem("memory").exists("/failing/run")


def test_a_url_gets_the_checkpoint_record_last_and_a_resume_copies_it_back() -> None:
    uploads: list[str] = []
    memory = fsspec.filesystem("memory")
    original_put = memory.put_file

    def recording_put(local: str, remote: str, *args: object, **kwargs: object) -> None:
        uploads.append(remote.rsplit("/", 1)[-1])
        original_put(local, remote, *args, **kwargs)

    memory.put_file = recording_put  # type: ignore[method-assign]
    try:
        with Staged("memory://bucket/runs", 5) as staging:
            (staging / RECORD).write_text("{}")
            (staging / "state.pt").write_bytes(b"state")
            (staging / "a.bin").write_bytes(b"a")
    finally:
        del memory.put_file
    assert uploads == ["a.bin", "state.pt", RECORD]
    copy = local_copy("memory://bucket/runs/checkpoint-5")
    assert copy.name == "checkpoint-5" and (copy / "state.pt").read_bytes() == b"state"


def test_local_paths_and_file_urls_are_used_in_place(tmp_path: Path) -> None:
    assert not is_remote(str(tmp_path)) and not is_remote(f"file://{tmp_path}") and is_remote("gs://bucket/run")
    assert local_copy(f"file://{tmp_path}") == tmp_path
    assert trainer_directory(f"file://{tmp_path}") == str(tmp_path)
    local = Path(trainer_directory("gs://bucket/run"))  # a Trainer writes locally; tpu_nb uploads each checked checkpoint
    assert local.is_dir() and local != tmp_path
    local.rmdir()


def test_pruning_removes_staging_left_by_a_cut_write_once_a_later_checkpoint_counts(tmp_path: Path) -> None:
    from tpu_nb.wire.checkpoints import CheckpointRecord
    from tpu_nb.workers.checkpoint_files import prune

    (tmp_path / "checkpoint-3.partial").mkdir()  # the session ended while step 3 was written
    (tmp_path / "checkpoint-9.partial").mkdir()  # being written now
    (tmp_path / "checkpoint-5").mkdir()
    (tmp_path / "checkpoint-5" / "state.pt").write_bytes(b"12345")
    record = CheckpointRecord(5, "loop", "2026-12-01T20:00:00+00:00", 1.0, 0.1, 5, True, None, None, [], {}, {}, {}, {"state.pt": 5})
    (tmp_path / "checkpoint-5" / RECORD).write_text(record.to_json())
    prune(str(tmp_path), keep=2)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-5", "checkpoint-9.partial"]
