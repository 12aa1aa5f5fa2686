"""Checkpoints from the notebook's side: the plan from the options as typed, and the listing."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.planning.checkpoint_plans import KAGGLE_BUDGET, describe_checkpoints, plan_checkpoints
from tpu_nb.wire.checkpoints import RECORD, CheckpointRecord, Every

NOW = datetime.datetime(2026, 12, 1, 20, 30, 0).timestamp()


def saved(directory: Path, step: int, verified: bool = True, loss: float = 0.5) -> Path:
    """A checkpoint as a worker leaves it: its state file, and its record written last."""
    path = directory / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "state.pt").write_bytes(b"x" * 2048)
    record = CheckpointRecord(
        step=step,
        kind="loop",
        saved_at="2026-12-01T20:00:00+00:00",
        seconds=1.5,
        stall_seconds=0.1,
        size=2048,
        verified=verified,
        problem=None if verified else "`model` reloads other than it was saved: the write was damaged",
        loss=loss,
        history=[(step, {"loss": loss})],
        parameters={"weight": [1, 4]},
        world={"world_size": 1, "mesh": None},
        start_checksums={},
        files={"state.pt": 2048},
    )
    (path / RECORD).write_text(record.to_json())
    return path


def test_no_checkpoint_options_is_no_plan() -> None:
    assert plan_checkpoints(None, None, 2, None) is None


def test_options_without_a_directory_or_that_cannot_be_read_are_refused_together(tmp_path: Path) -> None:
    with pytest.raises(LaunchRefused) as refused:
        plan_checkpoints(None, "500steps", 3, True, "10GB")
    message = str(refused.value)
    assert "--every needs --checkpoint DIR" in message and "--resume needs --checkpoint DIR" in message
    assert "--budget needs --checkpoint DIR" in message and "--keep needs --checkpoint DIR" in message
    with pytest.raises(LaunchRefused) as refused:
        plan_checkpoints(str(tmp_path), "often", 0, None, "a lot")
    message = str(refused.value)
    assert "--every often: give a duration such as 90s" in message
    assert "--keep 0: keep at least 1" in message
    assert "--budget a lot: give a size such as 500MB or 15GB" in message


def test_a_plan_reads_every_keep_and_budget(tmp_path: Path) -> None:
    plan = plan_checkpoints(str(tmp_path), "500steps", 3, None, "2.5GB")
    assert plan is not None
    assert (plan.directory, plan.every, plan.keep, plan.budget, plan.resume_from) == (
        str(tmp_path),
        Every(steps=500),
        3,
        2_500_000_000,
        None,
    )
    default = plan_checkpoints(str(tmp_path), None, 2, None)
    assert default is not None and default.every == Every(seconds=900.0) and default.budget is None


def test_kaggles_output_directory_gets_a_budget_within_what_kaggle_keeps() -> None:
    plan = plan_checkpoints("/kaggle/working/checkpoints", "50steps", 2, None)
    assert plan is not None and plan.budget == KAGGLE_BUDGET < 20 * 10**9
    mine = plan_checkpoints("/kaggle/working-elsewhere", "50steps", 2, None, None)
    assert mine is not None and mine.budget is None


def test_resume_starts_from_the_newest_verified_checkpoint_and_names_what_it_passed_over(tmp_path: Path) -> None:
    saved(tmp_path, 100)
    saved(tmp_path, 200)
    saved(tmp_path, 300, verified=False)
    damaged = saved(tmp_path, 400)
    (damaged / "state.pt").write_bytes(b"x" * 10)
    (tmp_path / "checkpoint-500").mkdir()  # cut short: no record
    plan = plan_checkpoints(str(tmp_path), None, 2, True)
    assert plan is not None and plan.resume_from == str(tmp_path / "checkpoint-200")
    assert len(plan.passed_over) == 3
    assert plan.passed_over[0].startswith("checkpoint-300: failed its check: `model` reloads other than it was saved")
    assert plan.passed_over[1] == "checkpoint-400: damaged since it was saved: state.pt is 10 bytes, was 2,048 when saved"
    assert plan.passed_over[2].startswith("checkpoint-500: not verified (no tpu_nb.json")
    elsewhere = plan_checkpoints(str(tmp_path / "new"), None, 2, str(tmp_path))  # --checkpoint NEW --resume OLD
    assert (
        elsewhere is not None and elsewhere.directory == str(tmp_path / "new") and elsewhere.resume_from == str(tmp_path / "checkpoint-200")
    )


def test_resume_with_nothing_verified_is_refused_with_what_is_there(tmp_path: Path) -> None:
    with pytest.raises(LaunchRefused, match="holds no checkpoint; start without --resume"):
        plan_checkpoints(str(tmp_path / "empty"), None, 2, True)
    saved(tmp_path, 7, verified=False)
    with pytest.raises(LaunchRefused, match=r"holds no verified checkpoint \(checkpoint-7: failed its check"):
        plan_checkpoints(str(tmp_path), None, 2, True)


def test_the_listing_shows_step_loss_size_and_state(tmp_path: Path) -> None:
    saved(tmp_path, 100, loss=0.75)
    saved(tmp_path, 200, verified=False)
    text, markup = describe_checkpoints(str(tmp_path))
    lines = text.splitlines()
    assert lines[0] == str(tmp_path) and lines[1].split() == ["step", "saved", "(UTC)", "loss", "size", "took", "state"]
    assert lines[2].split()[:7] == ["100", "2026-12-01", "20:00", "0.75", "2.0", "KiB", "1.5s"] and lines[2].endswith("verified")
    assert "failed its check" in lines[3]
    assert markup.count("<tr>") == 3 and "&#x27;" not in markup
    assert describe_checkpoints(str(tmp_path / "nowhere"))[0].endswith("no checkpoints")


def test_a_fresh_run_into_a_directory_with_an_earlier_runs_checkpoints_is_refused(tmp_path: Path) -> None:
    saved(tmp_path, 60)
    with pytest.raises(LaunchRefused) as refused:
        plan_checkpoints(str(tmp_path), None, 2, None)
    assert "holds checkpoints of an earlier run (the newest at step 60): add --resume to continue it" in str(refused.value)
    with pytest.raises(LaunchRefused, match="holds checkpoints of an earlier run"):
        plan_checkpoints(str(tmp_path), None, 2, str(tmp_path / "elsewhere"))  # resuming another run into this one
    resumed = plan_checkpoints(str(tmp_path), None, 2, True)
    assert resumed is not None and resumed.resume_from == str(tmp_path / "checkpoint-60")
