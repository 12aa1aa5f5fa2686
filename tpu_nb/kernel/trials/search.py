"""A search: each next trial asked of an Optuna study as a world frees, its intermediate values told to it, and stopped at a
step boundary when the study's pruner says so.

Optuna's ask-and-tell interface, all in the sweep's thread: `take` asks
the study for a trial and makes its values with the user's space (what
the cell gets as `trial`); every reported value of the metric at a new
step is `trial.report(value, step)`, then `should_prune()`; a trial's end
is told as complete (with its last value of the metric), pruned or failed.
Only a search imports this module, and with it Optuna.

What a resume needs is kept in the study itself, as user attributes of
its trials, so a study with storage resumes after a kernel restart:
- `VALUES`: the values the space returned (what the trial ran with);
- `STOPPED`: why a trial ended before it finished (an interrupt, the
  deadline, the search ending around it): told to the study as failed,
  and run again by `--resume`;
- `RERUNS`: on a trial that runs an unfinished one again, the number of the
  first of them, whose checkpoint directory it continues.
A trial the study still holds as running when a search resumes was left by
a kernel that ended: it is told as failed and run again too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.exceptions import OptunaError
from optuna.trial import FrozenTrial, TrialState

from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.notebook.cell_output import Write
from tpu_nb.kernel.trials.comparison import MetricChoice
from tpu_nb.kernel.trials.spec import Trial
from tpu_nb.kernel.trials.sweep import Dropped, StopAsked, TrialNotMade, TrialOutcome, TrialWatch
from tpu_nb.kernel.trials.sweep_record import plain_values
from tpu_nb.wire.events import Event, Progress
from tpu_nb.wire.stop_reason import StopReason

VALUES = "tpu_nb_values"
STOPPED = "tpu_nb_stopped"
RERUNS = "tpu_nb_reruns"
STUDY_FAULTS = (OptunaError, OSError, sqlalchemy.exc.SQLAlchemyError)
"""What a study's storage can raise (a database locked, a disk full, a file the OS refuses)."""
UNFINISHED = ("stopped", "interrupted")
"""How a trial ends when it was stopped before it finished: run again by --resume."""
EARLIER = {TrialState.COMPLETE: "done earlier", TrialState.PRUNED: "pruned earlier", TrialState.FAIL: "failed earlier"}


@dataclass(frozen=True, slots=True)
class Resumed:
    """What `--resume` found in the study: its finished trials (they count, and do not run again), how many trials are left
    to run, and the unfinished trials queued to run again first."""

    earlier: tuple[TrialOutcome, ...]
    to_run: int
    again: tuple[int, ...]


def resume_search(study: optuna.Study, n_trials: int, metric: MetricChoice, write: Write) -> Resumed:
    """Continue `study` towards `n_trials` finished trials: its unfinished trials (stopped, or left running by a kernel that
    ended) are told as failed and queued with the same parameters, to run first."""
    trials = study.get_trials(deepcopy=False)
    again = [trial for trial in trials if _unfinished(trial) and not _superseded(trial, trials)]
    for trial in again:
        if trial.state == TrialState.RUNNING:
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
        study.enqueue_trial(dict(trial.params), user_attrs={RERUNS: _first_run(trial)})
    finished = [trial for trial in trials if trial.state in EARLIER and not _unfinished(trial) and not _superseded(trial, trials)]
    to_run = max(0, n_trials - len(finished))
    write(
        "stderr",
        f"tpu_nb: --resume: study {study.study_name!r} holds {len(finished)} finished trial(s) of {n_trials}; {to_run} to run"
        + (f", first {_numbers(again)} again (unfinished)" if again else "")
        + ".\n",
    )
    return Resumed(tuple(_earlier(trial, metric) for trial in finished), to_run, tuple(trial.number for trial in again))


def note_running(study: optuna.Study, write: Write) -> None:
    """Without --resume: trials the study holds as running are not this search's; say what they are and how to run them."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if running:
        write(
            "stderr",
            f"tpu_nb: study {study.study_name!r} holds {_numbers(running)} as running, which this search does not run: left by "
            "a kernel that ended, or running elsewhere; --resume runs them again.\n",
        )


class Search(TrialWatch):
    """The trials of one search: asked of the study as worlds free, each reported, pruned and told as it goes."""

    what = "study"

    def __init__(
        self, study: optuna.Study, space: Callable[[Any], Mapping[str, Any]], to_run: int, metric: MetricChoice, write: Write
    ) -> None:
        self._study = study
        self._space = space
        self._left = to_run
        self._metric = metric
        self._write = write
        self._asked: dict[int, optuna.Trial] = {}  # started or about to: told when they end
        self._reported: dict[int, int] = {}  # the last step told, by trial
        self._pruned: dict[int, str] = {}  # why each trial its pruner stopped was pruned

    def take(self) -> Trial | None:
        """The study's next trial, its values made by the space; None once `to_run` were asked (or the study fails)."""
        if self._left <= 0:
            return None
        try:
            asked = self._study.ask()
        except STUDY_FAULTS as error:
            self._left = 0
            self._write(
                "stderr",
                f"tpu_nb: study {self._study.study_name!r} could not give a next trial ({type(error).__name__}: {error}); no more "
                "start, the running ones finish.\n",
            )
            return None
        self._left -= 1
        self._asked[asked.number] = asked
        first_run = asked.user_attrs.get(RERUNS)
        continues = first_run if isinstance(first_run, int) else None
        try:
            values = _checked(self._space(asked))
        # The space is the user's code, run here in the kernel: whatever it raises fails this trial (told to the study),
        # and the first trial's error is the user's to see, with its traceback.
        except Exception as error:  # noqa: BLE001
            trial = Trial(asked.number, MappingProxyType({}), continues)
            text = f"its space raised {type(error).__name__}: {error}"
            self._write("stderr", f"tpu_nb: trial #{asked.number} failed: {text}\n")
            try:
                self._tell(self._asked.pop(asked.number), state=TrialState.FAIL)
            except STUDY_FAULTS as fault:
                self._write(
                    "stderr", f"tpu_nb: study {self._study.study_name!r} could not be told trial #{asked.number} failed ({fault}).\n"
                )
            raise TrialNotMade(TrialOutcome(trial, "failed", None, Ending("failed", text, error), (), None), error) from None
        try:
            asked.set_user_attr(VALUES, plain_values(values))
        except STUDY_FAULTS as error:
            self._write("stderr", f"tpu_nb: study {self._study.study_name!r} could not keep trial #{asked.number}'s values ({error}).\n")
        return Trial(asked.number, MappingProxyType(dict(values)), continues)

    def drop(self) -> Dropped:
        left, self._left = self._left, 0
        return Dropped((), left)

    def stop_for(self, trial: Trial) -> StopAsked | None:
        why = self._pruned.get(trial.number)
        return None if why is None else StopAsked(StopReason.PRUNED, why)

    def on_event(self, trial: Trial, event: Event) -> None:
        """A reported value of the metric at a new step: told to the study, then (until it says prune) its pruner asked."""
        if not isinstance(event, Progress) or event.step is None:
            return
        value = event.metrics.get(self._metric.name)
        asked = self._asked.get(trial.number)
        if asked is None or not isinstance(value, int | float) or not math.isfinite(value):
            return
        if event.step <= self._reported.get(trial.number, -1):
            return  # a step is told once (Optuna keeps the first)
        self._reported[trial.number] = event.step
        asked.report(float(value), event.step)
        if trial.number not in self._pruned and asked.should_prune():
            self._pruned[trial.number] = f"pruned at step {event.step} ({self._metric.name}={value:.6g})"

    def ended(self, outcome: TrialOutcome) -> None:
        """Tell the study how the trial ended: complete with its last value of the metric, pruned, or failed."""
        asked = self._asked.pop(outcome.trial.number, None)
        pruned = self._pruned.pop(outcome.trial.number, None) is not None
        self._reported.pop(outcome.trial.number, None)
        if asked is None:
            return  # not one this search asked (an earlier one shown on a resume)
        if outcome.status == "done":
            value = outcome.final.get(self._metric.name)
            if value is not None and math.isfinite(value):
                self._tell(asked, value)
                return
            self._write(
                "stderr",
                f"tpu_nb: trial #{asked.number} ({outcome.trial.label}) finished without reporting {self._metric.name}: told to "
                "the study as failed.\n",
            )
            self._tell(asked, state=TrialState.FAIL)
        elif outcome.status == "pruned" or (pruned and outcome.status in UNFINISHED):  # pruned, ended hard past the stop's wait
            self._tell(asked, state=TrialState.PRUNED)
        elif outcome.status in UNFINISHED:
            self._tell(asked, state=TrialState.FAIL, stopped=(outcome.ending.text if outcome.ending else None) or outcome.status)
        else:
            self._tell(asked, state=TrialState.FAIL)

    def close(self) -> None:
        """After the search, however it ended: a trial asked but never told (the search broke around it) is told as failed,
        unfinished, so that --resume runs it again; the study never keeps a trial of ours as running."""
        while self._asked:
            number, asked = self._asked.popitem()
            try:
                self._tell(asked, state=TrialState.FAIL, stopped="the search ended before it did")
            except STUDY_FAULTS as error:
                self._write("stderr", f"tpu_nb: study {self._study.study_name!r} could not be told trial #{number}'s end ({error}).\n")

    def _tell(self, asked: optuna.Trial, value: float | None = None, state: TrialState | None = None, stopped: str | None = None) -> None:
        """Tell the study how trial `asked` ended; `stopped`: why it ended before it finished (--resume runs it again)."""
        if stopped is not None:
            asked.set_user_attr(STOPPED, stopped)
        self._study.tell(asked, value, state, skip_if_finished=True)


def _checked(values: Any) -> Mapping[str, Any]:
    """The space's values: a dict with str keys (the cell's `trial`)."""
    if not isinstance(values, Mapping) or not all(isinstance(name, str) for name in values):
        raise TypeError(f"the space returned a {type(values).__name__}; return a dict of the trial's values, e.g. {{'lr': 1e-4}}")
    return values


def _first_run(trial: FrozenTrial) -> int:
    first = trial.user_attrs.get(RERUNS)
    return first if isinstance(first, int) else trial.number


def _unfinished(trial: FrozenTrial) -> bool:
    """Stopped before it finished (told as failed with the reason), or still running (its kernel ended)."""
    return trial.state == TrialState.RUNNING or (trial.state == TrialState.FAIL and STOPPED in trial.user_attrs)


def _superseded(trial: FrozenTrial, trials: Sequence[FrozenTrial]) -> bool:
    """A later trial runs it again (it was unfinished when an earlier resume queued it)."""
    return any(_first_run(later) == _first_run(trial) for later in trials if later.number > trial.number)


def _earlier(trial: FrozenTrial, metric: MetricChoice) -> TrialOutcome:
    values = trial.user_attrs.get(VALUES)
    shown = dict(values) if isinstance(values, dict) else dict(trial.params)
    final = {} if trial.value is None else {metric.name: trial.value}
    return TrialOutcome(Trial(trial.number, MappingProxyType(shown)), EARLIER[trial.state], None, None, ({"step": None, **final},), None)


def _numbers(trials: Sequence[FrozenTrial]) -> str:
    return "trial(s) " + ", ".join(f"#{trial.number}" for trial in trials)
