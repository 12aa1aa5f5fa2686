"""sweep.json: which trials finished, so that a resume skips exactly those (same number, same values)."""

from __future__ import annotations

from pathlib import Path

from tpu_nb.kernel.trials.spec import parse_trials
from tpu_nb.kernel.trials.sweep_record import RECORD, finished_trials, record_trial, trial_directory


def test_only_trials_recorded_done_with_the_same_values_count_as_finished(tmp_path: Path) -> None:
    trials = parse_trials("lr=0.1,0.2,0.3")
    record_trial(str(tmp_path), trials[0], "done", {"loss": 0.5})
    record_trial(str(tmp_path), trials[1], "failed", {"loss": 9.0})
    record_trial(str(tmp_path), trials[2], "done", {"loss": 0.4})
    assert finished_trials(str(tmp_path), trials) == {0: {"loss": 0.5}, 2: {"loss": 0.4}}
    changed = parse_trials("lr=0.1,0.2,0.35")  # trial 2 is another trial now: it runs again
    assert finished_trials(str(tmp_path), changed) == {0: {"loss": 0.5}}
    record_trial(str(tmp_path), trials[1], "done", {"loss": 0.45})  # a rerun replaces its entry
    assert set(finished_trials(str(tmp_path), trials)) == {0, 1, 2}


def test_no_record_or_an_unreadable_one_reruns_every_trial_and_a_url_keeps_none(tmp_path: Path) -> None:
    trials = parse_trials("folds=2")
    assert finished_trials(str(tmp_path / "new"), trials) == {}
    (tmp_path / RECORD).write_text("{not json")
    assert finished_trials(str(tmp_path), trials) == {}
    record_trial("gs://bucket/sweep", trials[0], "done", {})  # nothing written locally for a remote directory
    assert not Path("gs:").exists()
    assert trial_directory("gs://bucket/sweep/", trials[1]) == "gs://bucket/sweep/trial-1"
