"""HeldReturns: a sweep keeps every trial's --return values, and only the best-so-far trial's --return-best ones."""

from __future__ import annotations

from typing import Any

from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.trials.comparison import MetricChoice, TrialRow
from tpu_nb.kernel.trials.spec import Trial, parse_trials
from tpu_nb.kernel.trials.sweep import TrialOutcome
from tpu_nb.kernel.trials.sweep_returns import HeldReturns
from tpu_nb.wire.results import RankResult

LOSS = MetricChoice("loss", larger_is_better=False)


def ended(held: HeldReturns, trial: Trial, status: str = "done", **final: float) -> tuple[set[str], TrialOutcome]:
    """What the sweep does as a trial ends: asks what to load (when its results came back), then hands its outcome over."""
    names: set[str] = set()
    if status == "done":
        names = set(held.to_load(trial, final))
        result = RankResult(trial.number, True, {name: f"{name} of #{trial.number}" for name in names})
        ending = Ending("done", None, None, {0: result})
    else:
        ending = Ending("failed", "it raised", ValueError("planted"))
    return names, held.take(TrialOutcome(trial, status, "cpu 0", ending, ({"step": 1, **final},), 1.0))


def returned_in(outcome: TrialOutcome) -> Any:
    assert outcome.ending is not None
    return {rank: dict(result.returned) for rank, result in outcome.ending.results.items()}


def test_best_so_far_loads_its_values_and_lets_go_of_the_previous_best_the_rest_load_none() -> None:
    trials = parse_trials("n=0,1,2,3")
    held = HeldReturns(every=(), best=("model",), metric=LOSS, earlier=())
    assert ended(held, trials[0], loss=3.0)[0] == {"model"}  # the best so far
    assert ended(held, trials[1], loss=1.0)[0] == {"model"}  # better: #0's let go before it loads
    assert ended(held, trials[2], loss=2.0)[0] == set()
    assert ended(held, trials[3], "failed", loss=0.5)[0] == set()  # ranks first, but its values never came back
    back = held.best_back()
    assert back is not None and back.trial.number == 1
    assert back.result is not None and dict(back.result.returned) == {"model": "model of #1"}
    again = held.best_back()
    assert again is not None and again.result is None  # let go once handed over


def test_every_trials_return_values_are_kept_and_no_outcome_keeps_them() -> None:
    trials = parse_trials("n=0,1")
    held = HeldReturns(every=("weights",), best=("model",), metric=LOSS, earlier=())
    names, first = ended(held, trials[0], loss=2.0)
    assert names == {"weights", "model"}
    names, second = ended(held, trials[1], loss=3.0)
    assert names == {"weights"}
    assert returned_in(first) == returned_in(second) == {0: {}}
    assert first.ending is not None and first.ending.results[0].value == 0  # the trial's value stays
    assert dict(held.returned_by(1)) == {"weights": "weights of #1"}
    assert dict(held.returned_by(1)) == {}  # handed over once


def test_without_a_metric_the_first_eval_loss_lets_go_of_a_best_by_loss() -> None:
    trials = parse_trials("n=0,1,2")
    held = HeldReturns(every=(), best=("model",), metric=None, earlier=())
    assert ended(held, trials[0], loss=1.0)[0] == {"model"}  # compared by loss: nothing reported eval_loss yet
    ended(held, trials[1], "failed", loss=2.0, eval_loss=0.5)  # from now on eval_loss compares: #0 cannot be the best
    assert held.best_back() is None
    assert ended(held, trials[2], loss=3.0, eval_loss=0.7)[0] == {"model"}
    back = held.best_back()
    assert back is not None and back.trial.number == 2 and back.result is not None


def test_a_trial_done_in_an_earlier_session_counts_for_the_metric_but_is_never_taken() -> None:
    trials = parse_trials("n=0,1")
    earlier = [TrialRow(trials[0], "done earlier", None, {"loss": 0.1, "eval_loss": 0.2}, None)]
    held = HeldReturns(every=(), best=("model",), metric=None, earlier=earlier)
    assert ended(held, trials[1], loss=0.5)[0] == set()  # eval_loss compares (the earlier trial reported it); #1 has none
    assert held.best_back() is None


def test_a_pruned_trial_loads_none_of_the_best_s_values_and_the_best_so_far_keeps_its_own() -> None:
    trials = parse_trials("n=0,1")
    held = HeldReturns(every=(), best=("model",), metric=LOSS, earlier=())
    assert ended(held, trials[0], loss=1.0)[0] == {"model"}
    assert set(held.to_load(trials[1], {"loss": 0.2}, "pruned")) == set()  # lower, but stopped early by its pruner
    pruned = Ending("pruned", "stopped by its pruner at step 1", None, {0: RankResult(1, True, {})})
    held.take(TrialOutcome(trials[1], "pruned", "cpu 1", pruned, ({"step": 1, "loss": 0.2},), 1.0))
    back = held.best_back()
    assert back is not None and back.trial.number == 0 and back.result is not None
