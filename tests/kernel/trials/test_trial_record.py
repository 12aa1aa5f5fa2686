"""trial.json: the values that trained a trial's directory, written as it starts, checked by a resume; a mismatch moved aside."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from tpu_nb.kernel.trials.spec import parse_trials
from tpu_nb.kernel.trials.trial_record import VALUES, move_aside, move_back, record_values, trained_with


@pytest.fixture
def memory_directory() -> Iterator[str]:
    """A directory behind an fsspec URL, as gs:// is: memory://, emptied after the test."""
    filesystem = fsspec.filesystem("memory")
    yield "memory://sweep/trial-1"
    if filesystem.exists("/sweep"):
        filesystem.rm("/sweep", recursive=True)


@pytest.mark.parametrize("where", ["local", "url"])
def test_the_values_recorded_as_a_trial_starts_are_those_a_resume_compares(where: str, tmp_path: Path, memory_directory: str) -> None:
    directory = str(tmp_path / "trial-1") if where == "local" else memory_directory
    old, new = parse_trials("lr=0.1,0.2 seed=0")
    record_values(directory, old)
    assert trained_with(directory).values == {"lr": 0.1, "seed": 0}
    assert trained_with(directory).same_as(old) and not trained_with(directory).same_as(new)


def test_a_directory_without_values_or_with_unreadable_ones_says_why_it_cannot_tell(tmp_path: Path) -> None:
    trial = parse_trials("lr=0.1")[0]
    assert trained_with(str(tmp_path)).unknown == "it has no trial.json"
    (tmp_path / VALUES).write_text("{cut sh")
    assert "its trial.json could not be read" in str(trained_with(str(tmp_path)).unknown)
    (tmp_path / VALUES).write_text("[1, 2]")
    assert trained_with(str(tmp_path)).unknown == "its trial.json holds no values"
    assert not trained_with(str(tmp_path)).same_as(trial)


def test_a_directory_moved_aside_takes_the_first_free_name_and_keeps_everything(tmp_path: Path) -> None:
    directory = tmp_path / "trial-2"
    (directory / "checkpoint-4").mkdir(parents=True)
    (tmp_path / "trial-2.earlier-1").mkdir()  # an earlier one, moved aside before
    aside = move_aside(str(directory))
    assert aside == f"{directory}.earlier-2"
    assert not directory.exists() and (Path(aside) / "checkpoint-4").is_dir()
    move_back(aside, str(directory))
    assert (directory / "checkpoint-4").is_dir() and not Path(aside).exists()
