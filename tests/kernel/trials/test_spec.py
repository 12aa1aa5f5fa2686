"""--trials SPEC: folds, grids and lists of dicts become numbered trials; anything else is refused with what to write."""

from __future__ import annotations

import tracemalloc

import pytest

from tpu_nb.kernel.trials.spec import TrialSpecError, parse_trials


def test_folds_number_every_fold_and_say_how_many() -> None:
    trials = parse_trials("folds=5")
    assert [dict(trial.values) for trial in trials] == [{"fold": fold, "folds": 5} for fold in range(5)]
    assert [trial.number for trial in trials] == [0, 1, 2, 3, 4]
    assert trials[2].label == "fold 3/5"


def test_a_grid_is_every_combination_with_the_last_name_varying_fastest() -> None:
    trials = parse_trials("lr=1e-5,3e-5 seed=0,1 optim=adamw")
    assert [dict(trial.values) for trial in trials] == [
        {"lr": 1e-5, "seed": 0, "optim": "adamw"},
        {"lr": 1e-5, "seed": 1, "optim": "adamw"},
        {"lr": 3e-5, "seed": 0, "optim": "adamw"},
        {"lr": 3e-5, "seed": 1, "optim": "adamw"},
    ]
    assert trials[1].label == "lr=1e-05 seed=1 optim='adamw'"


def test_the_quotes_a_magic_keeps_around_a_grid_are_not_part_of_it() -> None:
    assert parse_trials('"lr=0.1,0.2 seed=0"') == parse_trials("'lr=0.1,0.2 seed=0'") == parse_trials("lr=0.1,0.2 seed=0")


def test_folds_with_a_grid_run_every_fold_of_every_combination() -> None:
    trials = parse_trials("lr=0.1,0.2 folds=3")
    assert len(trials) == 6
    assert dict(trials[4].values) == {"lr": 0.2, "fold": 1, "folds": 3}
    assert trials[4].label == "fold 2/3 lr=0.2"


def test_a_notebook_name_holding_a_list_of_dicts_is_those_trials_in_order() -> None:
    grid = [{"lr": 0.1, "warmup": 10}, {"lr": 0.3}]
    trials = parse_trials("my_grid", {"my_grid": grid})
    assert [dict(trial.values) for trial in trials] == grid
    assert parse_trials(grid) == trials


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "give folds=K"),
        ("lr", "is not NAME=VALUE"),
        ("lr=0.1 lr=0.2", "lr is given twice"),
        ("folds=1", "2 or more"),
        ("folds=2,3", "one whole number of folds"),
        ("a=" + ",".join(map(str, range(40))) + " b=" + ",".join(map(str, range(40))), "1600 trials"),
        (5, "folds=5 for k-fold"),
        ([{"lr": 1}, 3], "item 1 is a int"),
        ([], "the list is empty"),
    ],
)
def test_what_cannot_be_read_is_refused_with_what_to_write(spec: object, says: str) -> None:
    with pytest.raises(TrialSpecError, match=says):
        parse_trials(spec)  # type: ignore[arg-type]


def test_a_name_not_in_the_notebook_is_read_as_written() -> None:
    with pytest.raises(TrialSpecError, match="'grid' is not NAME=VALUE"):
        parse_trials("grid", {})


@pytest.mark.parametrize(("spec", "axis"), [("lr=,", "lr"), ("lr=0.1 seed=,", "seed"), ("wd=, folds=3", "wd")])
def test_a_name_without_values_is_refused_naming_it_not_a_sweep_of_no_trials(spec: str, axis: str) -> None:
    with pytest.raises(TrialSpecError, match=f"--trials: {axis}= has no values"):
        parse_trials(spec)


@pytest.mark.parametrize("spec", [" ".join(f"{name}=0,1,2,3,4,5,6,7,8,9" for name in "abcdef"), "a=1,2,3,4,5,6,7,8,9,10 b=1,2 folds=60"])
def test_too_many_trials_are_counted_and_refused_before_any_is_built(spec: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(TrialSpecError, match="more than 1000"):
            parse_trials(spec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # a million combinations built first took over 100 MB
