"""A run's checkpoints on disk: how often, until when, and what a directory holds (verified or not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpu_nb.basics.units import UnitError
from tpu_nb.wire.checkpoints import RECORD, CheckpointError, CheckpointRecord, Every, list_checkpoints, newest_verified


def record(step: int, verified: bool = True) -> CheckpointRecord:
    return CheckpointRecord(
        step=step,
        kind="loop",
        saved_at="2026-12-01T20:00:00+00:00",
        seconds=1.5,
        stall_seconds=0.1,
        size=1000,
        verified=verified,
        problem=None if verified else "the write was damaged",
        loss=0.5,
        history=[(1, {"loss": 0.9}), (step, {"loss": 0.5})],
        parameters={"weight": [2, 4]},
        world={"world_size": 1, "mesh": None},
        start_checksums={},
        files={"state.pt": 5},
    )


@pytest.mark.parametrize(
    ("text", "every"),
    [
        ("500steps", Every(steps=500)),
        ("1 step", Every(steps=1)),
        ("15m", Every(seconds=900.0)),
        ("1h30m", Every(seconds=5400.0)),
        ("90", Every(seconds=90.0)),
    ],
)
def test_every_reads_steps_or_a_duration(text: str, every: Every) -> None:
    assert Every.parse(text) == every


@pytest.mark.parametrize("text", ["soon", "0m", "15 minutes ago", ""])
def test_a_bad_every_says_what_to_give(text: str) -> None:
    with pytest.raises(UnitError, match="--every"):
        Every.parse(text)


def test_every_counts_at_least_one_step() -> None:
    with pytest.raises(CheckpointError, match="--every 0steps: give at least 1 step"):
        Every.parse("0steps")


def test_only_checkpoints_with_a_verified_record_count(tmp_path: Path) -> None:
    for step, verified in ((100, True), (200, True), (300, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / RECORD).write_text(record(step, verified).to_json())
        (tmp_path / f"checkpoint-{step}" / "state.pt").write_bytes(b"12345")
    (tmp_path / "checkpoint-400").mkdir()  # cut short before its record
    (tmp_path / "checkpoint-500.partial").mkdir()  # still being written
    (tmp_path / "runs").mkdir()
    found = list_checkpoints(str(tmp_path))
    assert [(checkpoint.step, checkpoint.verified) for checkpoint in found] == [(100, True), (200, True), (300, False), (400, False)]
    assert found[2].state == "failed its check: the write was damaged" and "no tpu_nb.json" in found[3].state
    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.step == 200 and newest.record == record(200)
    assert list_checkpoints(str(tmp_path / "nowhere")) == [] and newest_verified(str(tmp_path / "nowhere")) is None


def test_a_url_directory_is_read_through_fsspec() -> None:
    import fsspec

    memory = fsspec.filesystem("memory")
    memory.pipe("/runs-a/checkpoint-7/tpu_nb.json", record(7).to_json().encode())
    memory.pipe("/runs-a/checkpoint-7/state.pt", b"12345")
    newest = newest_verified("memory://runs-a")
    assert newest is not None and newest.step == 7 and newest.path == "memory://runs-a/checkpoint-7"


def test_a_checkpoint_whose_files_changed_since_it_was_saved_no_longer_counts(tmp_path: Path) -> None:
    for step in (100, 200, 300):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / RECORD).write_text(record(step).to_json())
    (tmp_path / "checkpoint-100" / "state.pt").write_bytes(b"12345")
    (tmp_path / "checkpoint-200" / "state.pt").write_bytes(b"123")  # cut by a full disk or a lost sync
    found = list_checkpoints(str(tmp_path))
    assert [checkpoint.verified for checkpoint in found] == [True, False, False]
    assert found[1].state == "damaged since it was saved: state.pt is 3 bytes, was 5 when saved"
    assert found[2].state == "damaged since it was saved: state.pt is missing"
    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.step == 100
