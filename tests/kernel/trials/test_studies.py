"""`tpu_nb.study`: a study kept in studies.db beside the run log, found again by the same cell after a restart."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import optuna
import pytest

import tpu_nb
from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.trials.studies import STUDIES_FILE


def test_a_study_is_kept_beside_the_run_log_and_the_same_cell_finds_it_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_NB_RUN_LOG", str(tmp_path / "runs"))
    study = tpu_nb.study("lr-search", pruner=optuna.pruners.MedianPruner(n_warmup_steps=2))
    trial = study.ask()
    trial.suggest_float("lr", 1e-5, 1e-3, log=True)
    study.tell(trial, 0.25)
    assert (tmp_path / "runs" / STUDIES_FILE).is_file()
    again = tpu_nb.study("lr-search")  # the cell run again (after a kernel restart)
    assert [(found.state, found.value) for found in again.trials] == [(optuna.trial.TrialState.COMPLETE, 0.25)]


def test_with_the_run_log_off_the_study_is_kept_in_memory_and_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    study = tpu_nb.study("passing", run_log="off")
    study.tell(study.ask(), 1.0)
    assert tpu_nb.study("passing", run_log="off").trials == []  # nothing kept from the first
    assert "tpu_nb: the run log is off, so study 'passing' is kept in memory: a kernel restart loses it." in capsys.readouterr().err


def test_a_run_log_directory_the_system_refuses_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.mkdir

    def read_only(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if str(path).startswith(str(tmp_path)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "mkdir", read_only)
    with pytest.raises(
        LaunchRefused,
        match=r"tpu_nb.study did not make the study:\n- the run log's directory cannot hold studies.db \(\[Errno 30\] Read-only file system",
    ):
        tpu_nb.study("nowhere", run_log=str(tmp_path / "runs"))
