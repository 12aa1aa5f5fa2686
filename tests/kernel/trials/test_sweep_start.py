"""A search's trial's checkpoints, planned as it starts: a rerun continues only what its own values trained."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.trials.spec import Trial, parse_trials
from tpu_nb.kernel.trials.sweep_start import _search_trial_options
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
