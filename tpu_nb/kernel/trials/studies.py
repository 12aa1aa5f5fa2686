"""`tpu_nb.study`: an Optuna study kept in an SQLite file beside the run log, so that a search on it survives a kernel restart.

A thin wrapper of `optuna.create_study(..., load_if_exists=True)`: the
same cell, run again after a restart, gives back the study with every
trial it holds, and `%%tpu_train --trials study ... --resume` continues it.
Any study made with Optuna's own `create_study` is a search's study too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from tpu_nb.kernel.endings.notebook_errors import call_refused
from tpu_nb.kernel.history.log import ENVIRONMENT_VARIABLE, log_directory
from tpu_nb.kernel.notebook.cell_output import write_to_sys
from tpu_nb.kernel.trials.search_plan import INSTALL

STUDIES_FILE = "studies.db"


def storage_beside_the_run_log(run_log: str | None = None) -> str | None:
    """The SQLite URL of `studies.db` in the run log's directory (`run_log`, else TPU_NB_RUN_LOG, else ./tpu_nb_runs), made
    if needed; None when the run log is off."""
    directory = log_directory(run_log)
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{Path(directory, STUDIES_FILE).resolve()}"


def study(
    name: str,
    *,
    direction: Literal["minimize", "maximize"] = "minimize",
    sampler: Any = None,
    pruner: Any = None,
    storage: Any = None,
    run_log: str | None = None,
) -> Any:
    """An Optuna study named `name`, loaded if it exists, for `%%tpu_train --trials STUDY --n-trials N --space SPACE`.

    `direction`, `sampler` and `pruner` are Optuna's (`optuna.create_study`'s defaults: TPE, and the median pruner).
    `storage` (default: `studies.db`, an SQLite file in the run log's directory, `run_log` or TPU_NB_RUN_LOG or
    tpu_nb_runs in the kernel's working directory) keeps every trial, so `--resume` continues the search after a kernel restart; with
    the run log off and no `storage`, the study is kept in memory only. Needs Optuna: pip install 'tpu_nb[search]'.
    """
    try:
        import optuna
    except ImportError:
        raise call_refused(
            "tpu_nb.study", "make the study", f"it needs Optuna, which is not installed here: {INSTALL} (or pip install optuna)."
        ) from None

    if storage is None:
        try:
            storage = storage_beside_the_run_log(run_log)
        except OSError as error:
            raise call_refused(
                "tpu_nb.study",
                "make the study",
                f"the run log's directory cannot hold {STUDIES_FILE} ({error}): give storage='sqlite:///PATH', or "
                f"another run_log (or {ENVIRONMENT_VARIABLE}).",
            ) from None
        if storage is None:
            write_to_sys("stderr", f"tpu_nb: the run log is off, so study {name!r} is kept in memory: a kernel restart loses it.\n")
    return optuna.create_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner, direction=direction, load_if_exists=True)
