"""A search's trial's checkpoints, planned as it starts: a rerun continues only what its own values trained."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.trials.spec import Trial, parse_trials
from tpu_nb.kernel.trials.sweep_start import _search_trial_options, check_sweep_options
from tpu_nb.kernel.trials.trial_record import record_values

SAVING = {"checkpoint": None, "every": "15m", "keep": 2, "budget": None, "resume": True}


def test_a_rerun_whose_first_runs_directory_another_configuration_trained_starts_afresh_its_directory_moved_aside(
    tmp_path: Path,
) -> None:
    (tmp_path / "trial-2" / "checkpoint-4").mkdir(parents=True)
    record_values(str(tmp_path / "trial-2"), parse_trials("n=7")[0])  # a search of another space left it
    written: list[str] = []
    rerun = Trial(6, MappingProxyType({"n": 2}), continues=2)
    options = _search_trial_options(LaunchOptions(), rerun, str(tmp_path), SAVING, lambda stream, text: written.append(text))
    assert options.checkpoints is not None
    assert (options.checkpoints.directory, options.checkpoints.resume_from) == (f"{tmp_path}/trial-2", None)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["trial-2.earlier-1"]
    assert written == [
        f"tpu_nb: trial #6 (n=2): {tmp_path}/trial-2 was trained with {{'n': 7}}: moved to {tmp_path}/trial-2.earlier-1, and the "
        "trial starts from scratch.\n"
    ]


@pytest.mark.parametrize(
    "values",
    [
        {"trials": None, "cores_per_trial": 1, "return_best": [], "trials_metric": None},  # the magic's defaults (argparse's list)
        {"background": True, "all_results": True},  # launch() without a sweep
        {"trials": "folds=2", "cores_per_trial": 2, "return_best": ["model"], "n_trials": None, "background": False, "pod": None},
    ],
)
def test_options_a_sweep_can_take_pass(values: dict[str, Any]) -> None:
    check_sweep_options(values)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"return_best": ["model"]}, "return_best is for a sweep: give trials too (--trials SPEC in the magic), or leave it out."),
        ({"cores_per_trial": 2, "space": print}, "cores_per_trial and space are for a sweep: give trials too"),
        ({"trials": "folds=2", "all_results": True}, "trials with all_results: a sweep runs in the foreground on this machine"),
        ({"trials": [{}], "background": True, "pod": "my-slice"}, "trials with background and pod: a sweep runs in the foreground"),
    ],
)
def test_a_sweeps_options_without_a_sweep_or_with_what_it_cannot_do_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchRefused) as refusal:
        check_sweep_options(values)
    assert str(refusal.value).startswith(f"tpu_nb did not start the run:\n- {message}")
