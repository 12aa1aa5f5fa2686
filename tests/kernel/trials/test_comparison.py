"""The comparison: best first by the chosen metric, which way is better, mean and spread across folds, each trial's speed."""

from __future__ import annotations

import statistics

import pytest

from tpu_nb.kernel.trials.comparison import MetricChoice, MetricError, TrialRow, compare, default_metric
from tpu_nb.kernel.trials.spec import parse_trials


def _rows(spec: str, finals: list[dict[str, float]], statuses: list[str] | None = None) -> list[TrialRow]:
    trials = parse_trials(spec)
    return [
        TrialRow(trial, (statuses or ["done"] * len(trials))[trial.number], f"cpu {trial.number}", final, 1.0)
        for trial, final in zip(trials, finals, strict=True)
    ]


def test_which_way_is_better_follows_the_metric_name_unless_told() -> None:
    assert MetricChoice.parse("eval_accuracy").larger_is_better
    assert not MetricChoice.parse("eval_loss").larger_is_better
    assert not MetricChoice.parse("eval_wer").larger_is_better
    assert MetricChoice.parse("eval_loss:max").larger_is_better
    assert not MetricChoice.parse("eval_f1:min").larger_is_better
    with pytest.raises(MetricError, match="eval_loss:min"):
        MetricChoice.parse("eval_f1:best")


def test_trials_are_ordered_best_first_and_those_without_the_metric_last() -> None:
    rows = _rows(
        "lr=1,2,3,4", [{"eval_accuracy": 0.7}, {}, {"eval_accuracy": 0.9}, {"eval_accuracy": 0.8}], ["done", "failed", "done", "done"]
    )
    comparison = compare(rows, MetricChoice.parse("eval_accuracy"))
    assert [row.trial.number for row in comparison.rows] == [2, 3, 0, 1]
    assert comparison.best is not None and comparison.best.trial.number == 2
    lowest = compare(rows, MetricChoice.parse("eval_accuracy:min"))
    assert [row.trial.number for row in lowest.rows] == [0, 3, 2, 1]


def test_folds_get_each_configurations_mean_and_sample_spread_best_mean_first() -> None:
    accuracies = [0.80, 0.84, 0.82, 0.60, 0.70, 0.65]
    rows = _rows("lr=0.1,0.2 folds=3", [{"eval_accuracy": value} for value in accuracies])
    comparison = compare(rows, MetricChoice.parse("eval_accuracy"))
    assert [group.label for group in comparison.groups] == ["lr=0.1", "lr=0.2"]
    first, second = comparison.groups
    assert first.mean == pytest.approx(statistics.fmean(accuracies[:3]))
    assert first.spread == pytest.approx(statistics.stdev(accuracies[:3]))
    assert (second.folds, second.counted) == (3, 3)
    text = comparison.text()
    assert "lr=0.1" in text and "± 0.02" in text and "(3 of 3 folds)" in text


def test_a_failed_fold_is_left_out_of_the_mean_and_counted() -> None:
    rows = _rows("folds=3", [{"loss": 1.0}, {}, {"loss": 3.0}], ["done", "failed", "done"])
    [group] = compare(rows, MetricChoice.parse("loss")).groups
    assert (group.mean, group.counted, group.folds) == (2.0, 2, 3)


def test_without_a_metric_eval_loss_is_compared_when_reported_else_loss() -> None:
    assert default_metric(_rows("lr=1,2", [{"loss": 1.0}, {"loss": 2.0, "eval_loss": 3.0}])).name == "eval_loss"
    assert default_metric(_rows("lr=1,2", [{"loss": 1.0}, {"loss": 2.0}])) == MetricChoice("loss", larger_is_better=False)


def test_each_trial_says_its_speed_where_it_counted_tokens() -> None:
    trials = parse_trials("lr=1,2")
    rows = [
        TrialRow(trials[0], "done", "chip 0", {"loss": 0.5}, 9.0, tokens_per_second=12_345.6, mfu=0.412),
        TrialRow(trials[1], "done", "chip 1", {"loss": 0.4}, 9.0),
    ]
    lines = compare(rows, MetricChoice.parse("loss")).text().splitlines()
    assert lines[1].endswith("loss=0.4 on chip 1")
    assert lines[2].endswith("loss=0.5 on chip 0 12,346 tokens/s MFU 41.2%")


def test_a_pruned_trial_shows_its_last_value_but_is_ranked_after_the_others_and_never_best() -> None:
    rows = _rows("lr=1,2,3", [{"loss": 0.1}, {"loss": 0.5}, {"loss": 0.3}], ["pruned", "done", "done"])
    comparison = compare(rows, MetricChoice.parse("loss"))
    assert [row.trial.number for row in comparison.rows] == [2, 1, 0]
    assert comparison.best is not None and comparison.best.trial.number == 2
    assert "pruned      loss=0.1" in comparison.text()
    only_pruned = compare(rows[:1], MetricChoice.parse("loss"))
    assert only_pruned.best is None
