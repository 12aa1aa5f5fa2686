"""A search told apart from a grid, and refused with its fix before anything starts; Optuna imported only for a search."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import optuna
import pytest

import tpu_nb
from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.trials.comparison import MetricChoice
from tpu_nb.kernel.trials.search_plan import SearchError, plan_search, search_asked
from tpu_nb.kernel.trials.sweep_start import plan_sweep


def space(trial: Any) -> dict[str, Any]:
    return {"lr": trial.suggest_float("lr", 1e-5, 1e-3, log=True)}


def test_a_grid_k_fold_or_list_never_imports_optuna() -> None:
    script = """
import json, sys
import tpu_nb, tpu_nb.magics, tpu_nb.kernel.launching
from tpu_nb.kernel.trials.sweep_start import plan_sweep
plans = [plan_sweep("lr=1e-5,3e-5 seed=0,1", 1, None), plan_sweep("folds=3", 1, "eval_loss"), plan_sweep([{"n": 1}], 1, None)]
print(json.dumps(["optuna" in sys.modules, [len(plan.trials) for plan in plans]]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [False, [4, 3, 1]]


def test_a_study_named_in_the_magic_is_a_search_with_its_space_and_the_metric_it_is_told() -> None:
    study = optuna.create_study(direction="maximize", study_name="acc")
    namespace = {"study": study, "space": space}
    assert search_asked("study", None, None, namespace) and not search_asked("lr=1,2", None, None, namespace)
    plan = plan_sweep("study", 1, "eval_accuracy", namespace, 8, "space")
    assert plan.trials == () and plan.search is not None
    assert (plan.search.study, plan.search.space, plan.search.n_trials) == (study, space, 8)
    assert plan.metric == plan.search.metric == MetricChoice("eval_accuracy", larger_is_better=True)
    minimizing = plan_search(optuna.create_study(), 4, space, None)
    assert minimizing.metric == MetricChoice("loss", larger_is_better=False)  # the default a minimizing study is told


@pytest.mark.parametrize(
    ("trials", "n_trials", "chosen", "metric", "fix"),
    [
        ("lr=1,2", 8, "space", None, "--n-trials and --space are for a search: --trials lr=1,2 is not an optuna.Study"),
        ("study", None, "space", None, "--trials study is a study: say how many trials to run, --n-trials N"),
        ("study", 0, "space", None, "--n-trials 0: give how many trials the search runs, 1 or more"),
        ("study", 8, "spaces", None, "--space spaces: the notebook defines no such name"),
        ("study", 8, "not_callable", None, "--space not_callable is a dict: give a function of an optuna.Trial"),
        ("study", 8, "space", "eval_accuracy", "eval_accuracy (higher is better), but study 'loss-study' minimizes it: make the study"),
        ("maximizing", 8, "space", None, "study 'acc' maximizes: name the metric it maximizes with --trials-metric"),
        ("two", 8, "space", None, "study 'two' has 2 objectives: a search tells it one metric"),
    ],
)
def test_a_search_that_cannot_run_as_asked_is_refused_with_its_fix(
    trials: str, n_trials: int | None, chosen: str, metric: str | None, fix: str
) -> None:
    namespace = {
        "study": optuna.create_study(study_name="loss-study"),
        "maximizing": optuna.create_study(direction="maximize", study_name="acc"),
        "two": optuna.create_study(directions=["minimize", "maximize"], study_name="two"),
        "space": space,
        "not_callable": {"lr": 1e-4},
    }
    with pytest.raises(LaunchRefused, match="did not start the run") as refusal:
        plan_sweep(trials, 1, metric, namespace, n_trials, chosen)
    assert fix in str(refusal.value)


def test_without_optuna_a_search_is_refused_with_the_line_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # what `import optuna` meets where it is not installed
    with pytest.raises(SearchError, match=r"is a search with Optuna, which is not installed here: pip install 'tpu_nb\[search\]'"):
        plan_search("study", 8, "space", None, {})
    with pytest.raises(
        LaunchRefused,
        match=r"tpu_nb.study did not make the study:\n- it needs Optuna, which is not installed here: pip install 'tpu_nb\[search\]'",
    ):
        tpu_nb.study("my-search")
    with pytest.raises(LaunchRefused, match="pip install 'tpu_nb"):
        tpu_nb.launch(space, trials="study", n_trials=8, space=space)


def test_a_searchs_options_without_trials_are_refused() -> None:
    with pytest.raises(LaunchRefused, match=r"n_trials is for a sweep: give trials too \(--trials SPEC in the magic\), or leave it out"):
        tpu_nb.launch(space, n_trials=8)
