"""What a sweep hands back: every trial's value, each trial's `--return` values, the best trial's `--return-best` ones."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tpu_nb.kernel.endings.notebook_errors import NotReturned
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.trials.comparison import MetricChoice, TrialRow, compare
from tpu_nb.kernel.trials.spec import parse_trials
from tpu_nb.kernel.trials.sweep import TrialOutcome
from tpu_nb.kernel.trials.sweep_result import SweepResult, hand_back_sweep
from tpu_nb.kernel.trials.sweep_returns import HeldReturns, came_back
from tpu_nb.wire import results
from tpu_nb.wire.results import Lost, ModuleWeights, RankResult

LOSS = MetricChoice("loss", larger_is_better=False)

TRIAL_CELL = """%%tpu_train --trials "n=1,2,3" --trials-metric loss {returns}
import time, torch
time.sleep(trial["n"] - 1)  # they end in trial order: #0 first looks best, until #1 (loss 0) ends
with torch.no_grad():
    model.weight.fill_(trial["n"])
report(step=0, loss=abs(trial["n"] - 2))
trial["n"]
"""


@dataclass
class Load:
    """One file of module weights the kernel loaded, and how many tensors loaded before were still alive then."""

    file: str
    earlier_alive: int


@pytest.fixture
def weights_loaded(monkeypatch: pytest.MonkeyPatch) -> list[Load]:
    """Every file of module weights the kernel loads (as results load them), as it loads it."""
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")  # three trials side by side, a world of one each
    loads: list[Load] = []
    tensors: list[weakref.ref[torch.Tensor]] = []
    real = results.load_weights

    def noting(path: Path) -> dict[str, Any]:
        loads.append(Load(str(path), sum(tensor() is not None for tensor in tensors)))
        loaded = real(path)
        tensors.extend(weakref.ref(tensor) for tensor in loaded.values())
        return loaded

    monkeypatch.setattr(results, "load_weights", noting)
    return loads


def held_weights(result: SweepResult) -> list[int]:
    """The trials whose outcome still holds module weights."""
    return [
        outcome.trial.number
        for outcome in result.trials
        if outcome.ending is not None
        for rank_result in outcome.ending.results.values()
        if any(isinstance(value, ModuleWeights) for value in rank_result.returned.values())
    ]


def test_return_best_holds_one_trials_weights_at_a_time_and_the_result_keeps_none(ip: InteractiveShell, weights_loaded: list[Load]) -> None:
    ip.run_cell("import torch\nmodel = torch.nn.Linear(4, 2)")
    with capture_output() as captured:
        cell = ip.run_cell(TRIAL_CELL.format(returns="--return-best model"))
    assert cell.success, captured.stdout + captured.stderr
    result = cell.result
    assert result.values == [1, 2, 3]  # every trial's value comes back
    assert torch.equal(ip.user_ns["model"].weight, torch.full((2, 4), 2.0))  # the best trial's (loss 0)
    assert "--return-best: model from trial #1 (n=2)" in captured.stdout
    # #0's weights (the best so far when it ended), then #1's, with #0's let go first; never #2's (worse than #1).
    assert [load.earlier_alive for load in weights_loaded] == [0, 0]
    assert held_weights(result) == []


def test_return_gives_every_trials_module_and_the_result_keeps_no_second_copy(ip: InteractiveShell, weights_loaded: list[Load]) -> None:
    ip.run_cell("import torch\nmodel = torch.nn.Linear(4, 2)")
    with capture_output() as captured:
        cell = ip.run_cell(TRIAL_CELL.format(returns="--return model"))
    assert cell.success, captured.stdout + captured.stderr
    models = ip.user_ns["model"]
    assert [float(module.weight[0, 0].detach()) for module in models] == [1.0, 2.0, 3.0]
    assert len(weights_loaded) == 3
    assert held_weights(cell.result) == []


def swept(held: HeldReturns, *outcomes: TrialOutcome) -> SweepResult:
    """The sweep's result of these ended trials, each handed to `held` as the sweep does (asked first what to load)."""
    taken = []
    for outcome in outcomes:
        if came_back(outcome) is not None:
            held.to_load(outcome.trial, outcome.final)
        taken.append(held.take(outcome))
    rows = [TrialRow(outcome.trial, outcome.status, outcome.where, outcome.final, outcome.seconds) for outcome in taken]
    return SweepResult(taken, compare(rows, LOSS))


def test_a_best_ranked_trial_whose_values_did_not_come_back_gives_way_to_the_best_that_did() -> None:
    trials = parse_trials("n=1,2")
    raised = TrialOutcome(trials[0], "failed", "cpu 0", Ending("failed", "it raised", ValueError("planted")), ({"loss": 0.1},), 1.0)
    weights = ModuleWeights({"weight": torch.full((2, 1), 2.0), "bias": torch.zeros(2)})
    finished = TrialOutcome(
        trials[1], "done", "cpu 1", Ending("done", None, None, {0: RankResult(2, True, {"model": weights})}), ({"loss": 0.5},), 1.0
    )
    held = HeldReturns(every=(), best=("model",), metric=LOSS, earlier=())
    result = swept(held, raised, finished)
    written: list[str] = []
    namespace: dict[str, Any] = {"model": torch.nn.Linear(1, 2)}
    hand_back_sweep(result, held, namespace, lambda stream, text: written.append(text))
    assert torch.equal(namespace["model"].weight, torch.full((2, 1), 2.0))
    assert written[0] == (
        "tpu_nb: --return-best: the best by loss, trial #0 (n=1), failed: its values did not come back; the best of those whose "
        "values did is taken.\n"
    )
    assert written[-1] == "tpu_nb: --return-best: model from trial #1 (n=2).\n"


def test_return_best_sets_nothing_when_no_trial_that_came_back_reported_the_metric() -> None:
    trials = parse_trials("n=1,2")
    earlier = TrialOutcome(trials[0], "done earlier", None, None, ({"step": None, "loss": 0.1},), None)
    silent = TrialOutcome(trials[1], "done", "cpu 1", Ending("done", None, None, {0: RankResult(2, True, {})}), (), 1.0)
    held = HeldReturns(every=(), best=("model",), metric=LOSS, earlier=[TrialRow(trials[0], "done earlier", None, earlier.final, None)])
    result = swept(held, earlier, silent)
    written: list[str] = []
    hand_back_sweep(result, held, {}, lambda stream, text: written.append(text))
    assert written == [
        "tpu_nb: --return-best model: the best by loss, trial #0 (n=1), done earlier: its values did not come back, and no trial "
        "whose values did reported loss; nothing was set.\n"
    ]


def test_return_best_of_a_name_the_best_trial_never_defined_is_said_as_one_runs_return_is() -> None:
    trials = parse_trials("n=1,2")
    weights = ModuleWeights({"weight": torch.full((2, 1), 2.0), "bias": torch.zeros(2)})
    best = TrialOutcome(
        trials[0],
        "done",
        "cpu 0",
        Ending("done", None, None, {0: RankResult(1, True, {"model": weights}, ("tok",))}),
        ({"loss": 0.1},),
        1.0,
    )
    worse = TrialOutcome(trials[1], "done", "cpu 1", Ending("done", None, None, {0: RankResult(2, True, {})}), ({"loss": 0.5},), 1.0)
    held = HeldReturns(every=(), best=("model", "tok"), metric=LOSS, earlier=())
    result = swept(held, best, worse)
    namespace: dict[str, Any] = {"model": torch.nn.Linear(1, 2)}
    with pytest.raises(NotReturned) as raised:
        hand_back_sweep(result, held, namespace, lambda stream, text: None)
    assert str(raised.value) == (
        "--return-best tok: the cell did not define `tok` on rank 0 of trial #0 (n=1), the best.\nEverything else was returned."
    )
    assert torch.equal(namespace["model"].weight, torch.full((2, 1), 2.0))  # what it did define is set
    assert "tok" not in namespace


def test_a_trials_return_value_no_place_could_hold_is_said_not_left_as_none() -> None:
    trials = parse_trials("n=1,2")
    weights = ModuleWeights({"weight": torch.full((2, 1), 1.0), "bias": torch.zeros(2)})
    kept = TrialOutcome(
        trials[0], "done", "cpu 0", Ending("done", None, None, {0: RankResult(1, True, {"model": weights})}), ({"loss": 0.1},), 1.0
    )
    lost = Lost("`model`", 3 << 30, ("/dev/shm/tpu_nb-x (64.0 MiB free): [Errno 28] No space left on device",))
    too_big = TrialOutcome(
        trials[1], "done", "cpu 1", Ending("done", None, None, {0: RankResult(2, True, {}, (), (lost,))}), ({"loss": 0.5},), 1.0
    )
    held = HeldReturns(every=("model",), best=(), metric=LOSS, earlier=())
    result = swept(held, kept, too_big)
    namespace: dict[str, Any] = {"model": torch.nn.Linear(1, 2)}
    with pytest.raises(NotReturned) as raised:
        hand_back_sweep(result, held, namespace, lambda stream, text: None)
    assert str(raised.value) == f"--return, trial #1 (n=2): {lost.explain()}\nEverything else was returned."
    assert [None if model is None else model.weight[0, 0].item() for model in namespace["model"]] == [1.0, None]
