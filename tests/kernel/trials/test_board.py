"""The sweep's board: a row per trial with its status, chips, step and metrics, a curve per trial, the comparison at the end."""

from __future__ import annotations

import pytest

from tpu_nb.kernel.planning.worlds import World
from tpu_nb.kernel.trials.board import SweepBoard
from tpu_nb.kernel.trials.comparison import MetricChoice, TrialRow, compare
from tpu_nb.kernel.trials.spec import parse_trials
from tpu_nb.kernel.trials.sweep import TrialOutcome
from tpu_nb.wire.events import Counted, Progress, WorkerStarted


def test_rows_follow_each_trial_and_the_end_adds_curves_and_the_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    trials = parse_trials("folds=3")
    worlds = [World(index, (index,), 1, {}, False) for index in range(2)]
    board = SweepBoard(trials, worlds, MetricChoice.parse("eval_accuracy"), "%%tpu_train --trials")
    board.started(trials[0], worlds[0])
    board.started(trials[1], worlds[1])
    for step in range(4):  # 100 tokens in each second-long step
        counted = Counted(float(step), step * 100, step * 4)
        board.on_event(trials[0], Progress(0, step, {"loss": 1.0 / (step + 1)}, max_steps=4, counted=counted))
    board.on_event(trials[1], Progress(0, 2, {"loss": 0.7, "eval_accuracy": 0.81}, max_steps=4))
    board.on_event(trials[1], WorkerStarted(0, 1, 123, "xla:0"))  # not a metric: nothing changes
    text = board.text().splitlines()
    assert text[0] == "%%tpu_train --trials: 3 trials, 2 at a time"
    assert text[1] == "  #0 fold 1/3: training on cpu 0 step 3/4 100 tokens/s loss=0.25"
    assert text[2] == "  #1 fold 2/3: training on cpu 1 step 2/4 loss=0.7 eval_accuracy=0.81"
    assert text[3] == "  #2 fold 3/3: queued"
    html = board.html()
    assert html.count("<tr>") == 4 and ">training<" in html and "<img" in html and ">tokens/s</th>" in html and ">100</td>" in html

    outcome = TrialOutcome(trials[0], "done", "cpu 0", None, ({"step": 3, "loss": 0.25, "eval_accuracy": 0.9},), 4.0)
    board.ended(outcome)
    assert capsys.readouterr().out == "tpu_nb: trial #0 (fold 1/3) done on cpu 0: loss=0.25, eval_accuracy=0.9\n"  # outside a notebook
    rows = [TrialRow(outcome.trial, "done", "cpu 0", outcome.final, 4.0), TrialRow(trials[1], "failed", "cpu 1", {}, 2.0)]
    board.finish(compare(rows, MetricChoice.parse("eval_accuracy")))
    assert "trials by eval_accuracy (higher is better)" in board.text() and "mean ± spread" in board.html()


def test_a_searchs_rows_come_as_trials_start_a_pruned_one_says_its_step_and_the_best_so_far_is_shown() -> None:
    trials = parse_trials("x=0.8,0.1,0.2")  # a search's trials, as the study gives them
    worlds = [World(index, (index,), 1, {}, False) for index in range(2)]
    board = SweepBoard((), worlds, MetricChoice.parse("eval_loss"), "%%tpu_train --trials", shown=False, planned=8)
    assert board.text() == "%%tpu_train --trials: 8 trials, 2 at a time"
    board.started(trials[0], worlds[0])
    board.on_event(trials[0], Progress(0, 10, {"loss": 0.8, "eval_loss": 0.9}))
    board.ended(TrialOutcome(trials[0], "pruned", "cpu 0", None, ({"step": 10, "eval_loss": 0.9},), 1.0))
    assert board.best_so_far() is None  # a pruned trial is never the best
    for trial, value in ((trials[1], 0.3), (trials[2], 0.2)):
        board.started(trial, worlds[0])
        board.on_event(trial, Progress(0, 40, {"loss": value, "eval_loss": value}))
        board.ended(TrialOutcome(trial, "done", "cpu 0", None, ({"step": 40, "eval_loss": value},), 2.0))
    lines = board.text().splitlines()
    assert lines[1] == "  #0 x=0.8: pruned at step 10 on cpu 0 loss=0.8 eval_loss=0.9"
    assert lines[-1] == "best so far: #2 (x=0.2) eval_loss=0.2"
    assert "pruned at step 10" in board.html() and "best so far: #2 (x=0.2)" in board.html()
