"""sweep.json: which trials finished, so that a resume skips exactly those (same number, same values); never worth a sweep."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tpu_nb.kernel.trials.spec import Trial, parse_trials
from tpu_nb.kernel.trials.sweep_record import RECORD, SweepRecord, finished_trials, read_record, trial_directory, write_record


def recorded(directory: Path, trial: Trial, status: str, final: dict[str, float]) -> None:
    write_record(str(directory), read_record(str(directory)).with_trial(trial, status, final))


def test_only_trials_recorded_done_with_the_same_values_count_as_finished(tmp_path: Path) -> None:
    trials = parse_trials("lr=0.1,0.2,0.3")
    recorded(tmp_path, trials[0], "done", {"loss": 0.5})
    recorded(tmp_path, trials[1], "failed", {"loss": 9.0})
    recorded(tmp_path, trials[2], "done", {"loss": 0.4})
    assert finished_trials(read_record(str(tmp_path)), trials) == {0: {"loss": 0.5}, 2: {"loss": 0.4}}
    changed = parse_trials("lr=0.1,0.2,0.35")  # trial 2 is another trial now: it runs again
    assert finished_trials(read_record(str(tmp_path)), changed) == {0: {"loss": 0.5}}
    recorded(tmp_path, trials[1], "done", {"loss": 0.45})  # a rerun replaces its entry
    assert set(finished_trials(read_record(str(tmp_path)), trials)) == {0, 1, 2}


def test_values_json_cannot_hold_are_recorded_as_text_and_still_match(tmp_path: Path) -> None:
    trials = parse_trials([{"schedule": {(0, 1): 2.0}}, {"schedule": {(0, 2): 2.0}}])
    recorded(tmp_path, trials[0], "done", {"loss": 0.5})
    assert finished_trials(read_record(str(tmp_path)), trials) == {0: {"loss": 0.5}}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "could not be read"),
        ('{"trials": []}', '"trials" is a list, not an object'),
        ("[]", "a list, not an object"),
        ('{"trials": {"0": 3}}', "trial 0's entry is not an object with a status"),
        ('{"trials": {"0": {"values": {"fold": 0, "folds": 2}, "status": "done", "final": 5}}}', 'trial 0\'s "final" is not'),
        ('{"trials": {"0": {"values": {"fold": 0, "folds": 2}, "status": "done", "final": {"loss": "low"}}}}', "of numbers"),
        ('{"trials": {"first": {"status": "done"}}}', "not a trial number"),
        ('{"trials": {"\\u00b2": {"status": "done"}}}', "'²', not a trial number"),  # str.isdigit() takes it, int() does not
    ],
)
def test_a_malformed_record_is_named_and_read_as_none_and_the_next_write_replaces_it(tmp_path: Path, content: str, says: str) -> None:
    trials = parse_trials("folds=2")
    (tmp_path / RECORD).write_text(content)
    record = read_record(str(tmp_path))
    assert record.entries == {} and record.problem is not None
    assert str(tmp_path / RECORD) in record.problem and says in record.problem
    assert finished_trials(record, trials) == {}
    write_record(str(tmp_path), record.with_trial(trials[1], "done", {"loss": 0.3}))
    assert finished_trials(read_record(str(tmp_path)), trials) == {1: {"loss": 0.3}}


def test_a_directory_that_refuses_the_record_raises_oserror_and_leaves_the_old_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trials = parse_trials("folds=2")
    recorded(tmp_path, trials[0], "done", {"loss": 0.5})

    def disk_full(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(destination))

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_record(str(tmp_path), read_record(str(tmp_path)).with_trial(trials[1], "done", {"loss": 0.4}))
    assert finished_trials(read_record(str(tmp_path)), trials) == {0: {"loss": 0.5}}


def test_no_record_reruns_every_trial_and_a_url_keeps_none(tmp_path: Path) -> None:
    trials = parse_trials("folds=2")
    assert read_record(str(tmp_path / "new")) == SweepRecord()
    write_record("gs://bucket/sweep", SweepRecord().with_trial(trials[0], "done", {}))  # nothing written locally for a remote directory
    assert not Path("gs:").exists()
    assert read_record("gs://bucket/sweep") == SweepRecord()
    assert trial_directory("gs://bucket/sweep/", trials[1]) == "gs://bucket/sweep/trial-1"
