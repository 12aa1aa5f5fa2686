"""From `--trials` to a finished sweep: the trials read, the worlds planned, each trial's options (its own checkpoints), the run.

`%%tpu_train --trials` and `tpu_nb.launch(..., trials=...)` both come here,
for a grid or k-fold (trials known before the first starts: everything that
can be refused is checked then) and for a search (`--trials STUDY`: each
trial asked of the study as a world frees, its checkpoints planned as it
starts; `search.py`, which imports Optuna, is imported only then).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpu_nb.kernel.endings.notebook_errors import refused
from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.planning.checkpoint_plans import plan_checkpoints
from tpu_nb.kernel.planning.declared_options import OPTION_NAMED
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.planning.worlds import World, WorldsUnavailable, plan_worlds
from tpu_nb.kernel.trials.board import SweepBoard
from tpu_nb.kernel.trials.comparison import MetricChoice, MetricError, TrialRow, compare, default_metric
from tpu_nb.kernel.trials.search_plan import SearchError, SearchPlan, plan_search, search_asked
from tpu_nb.kernel.trials.spec import Trial, TrialSpecError, parse_trials
from tpu_nb.kernel.trials.sweep import ListedTrials, Sweep, TrialOutcome, TrialSource, TrialWatch, Watches
from tpu_nb.kernel.trials.sweep_record import (
    FINISHED,
    SweepRecord,
    finished_trials,
    read_record,
    record_path,
    trial_directory,
    write_record,
)
from tpu_nb.kernel.trials.sweep_result import SweepResult
from tpu_nb.kernel.trials.sweep_returns import HeldReturns
from tpu_nb.kernel.trials.trial_record import move_aside, move_back, record_values, trained_with
from tpu_nb.runtime import detect
from tpu_nb.wire.checkpoints import list_checkpoints
from tpu_nb.workers.processes.programs import Program

EARLIER = "done earlier"
"""A trial a resumed sweep did not rerun: an earlier run of the sweep finished it."""
CHECKPOINT_OPTIONS = ("checkpoint", "every", "keep", "budget", "resume")


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """The trials (a search's come as it runs), how many cores each gets, and what compares them."""

    trials: tuple[Trial, ...]
    cores_per_trial: int
    metric: MetricChoice | None
    search: SearchPlan | None = None


def plan_sweep(
    trials: Any,
    cores_per_trial: int,
    metric: str | None,
    namespace: Mapping[str, Any] | None = None,
    n_trials: int | None = None,
    space: Any = None,
) -> SweepPlan:
    """The sweep `--trials`, `--cores-per-trial`, `--trials-metric` (and a search's `--n-trials`, `--space`) ask for;
    `LaunchRefused` with the fix."""
    try:
        choice = None if metric is None else MetricChoice.parse(metric)
        if search_asked(trials, n_trials, space, namespace):
            search = plan_search(trials, n_trials, space, choice, namespace)
            return SweepPlan((), cores_per_trial, search.metric, search)
        return SweepPlan(parse_trials(trials, namespace), cores_per_trial, choice)
    except (TrialSpecError, MetricError, SearchError) as error:
        raise refused(str(error)) from None


SWEEP_ONLY = ("cores_per_trial", "trials_metric", "n_trials", "space", "return_best")
"""The options that mean something only with `trials`."""
NOT_WITH_A_SWEEP = ("background", "all_results", "pod")
"""A sweep runs in the foreground, on this machine, and returns one SweepResult."""


def check_sweep_options(values: Mapping[str, Any]) -> None:
    """`LaunchRefused` for a sweep's options without `trials`, or `trials` with what a sweep cannot do.

    The one check of these rules, for `%%tpu_train` (`values`: its parsed arguments) and `tpu_nb.launch()` (its keywords)
    alike, so both refuse in the same words.
    """
    if values.get("trials") is None:
        stray = [name for name in SWEEP_ONLY if _given(name, values)]
        if stray:
            one = len(stray) == 1
            raise refused(
                f"{_and(stray)} {'is' if one else 'are'} for a sweep: give trials too (--trials SPEC in the magic), "
                f"or leave {'it' if one else 'them'} out."
            )
        return
    clashing = [name for name in NOT_WITH_A_SWEEP if values.get(name)]
    if clashing:
        raise refused(
            f"trials with {_and(clashing)}: a sweep runs in the foreground on this machine and returns a SweepResult; "
            f"leave {_and(clashing)} out."
        )


def _given(name: str, values: Mapping[str, Any]) -> bool:
    """Whether `values` gives option `name` other than as its default (argparse gives a list where the default is a tuple)."""
    default = OPTION_NAMED[name].default
    value = values.get(name, default)
    return tuple(value) != tuple(default) if isinstance(default, tuple) else bool(value != default)


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


@dataclass(frozen=True, slots=True)
class _Trials:
    """Where a sweep's trials come from, and what goes with them: their options, those an earlier run finished, the watches
    before the board, what the board knows of them first, and what to do once the sweep is over."""

    source: TrialSource
    options_for: Callable[[Trial], LaunchOptions]
    earlier: tuple[TrialOutcome, ...]
    watches: tuple[TrialWatch, ...]
    known: tuple[Trial, ...]
    planned: int
    close: Callable[[], None]


def run_sweep(
    plan: SweepPlan,
    program_for: Callable[[Trial], Program],
    run_options: Mapping[str, Any],
    title: str,
    write: Write = write_to_sys,
    returns: Sequence[str] = (),
    return_best: Sequence[str] = (),
) -> tuple[SweepResult, HeldReturns]:
    """Run the plan's trials side by side (`run_options`: the run options as given, `declared_options`' names); the result,
    and the `--return` (every trial's) and `--return-best` values held for `hand_back_sweep`."""
    both = [name for name in returns if name in return_best]
    if both:
        shown = " ".join(both)
        raise refused(
            f"--return {shown} and --return-best {shown}: a name is every trial's (--return: a list, a value per trial) or "
            "the best trial's (--return-best), not both; give each name to one of them."
        )
    plain = {**run_options, **{name: OPTION_NAMED[name].default for name in CHECKPOINT_OPTIONS}}
    options_given = LaunchOptions.from_user(**plain)
    base = dataclasses.replace(options_given, progress=False)  # the sweep's board shows every trial
    info = detect(stack=base.stack)
    try:
        worlds = plan_worlds(info, plan.cores_per_trial)
    except WorldsUnavailable as error:
        raise refused(str(error)) from None
    saving = {name: run_options.get(name, OPTION_NAMED[name].default) for name in CHECKPOINT_OPTIONS}
    resume = saving["resume"]
    checkpoint = saving["checkpoint"] or (resume if isinstance(resume, str) and resume else None)  # --resume DIR continues there
    if checkpoint is None:  # refuses what needs --checkpoint (a search's --resume continues its study: it needs none)
        plan_checkpoints(None, saving["every"], saving["keep"], None if plan.search else resume, saving["budget"])
    if plan.search is not None:
        trials = _search(plan.search, base, checkpoint, saving, write)
    else:
        trials = _grid(plan.trials, base, checkpoint, saving, write)
    board = SweepBoard(trials.known, worlds, plan.metric, title, write, shown=options_given.progress, planned=trials.planned)
    watches = Watches([*trials.watches, board], write)
    for outcome in trials.earlier:
        watches.ended(outcome)
    held = HeldReturns(returns, return_best, plan.metric, [_row(outcome) for outcome in trials.earlier])
    sweep = Sweep(trials.source, program_for, trials.options_for, worlds, title, watches, write, held)
    try:
        ran = {outcome.trial.number: outcome for outcome in [*trials.earlier, *sweep.run()]}
    finally:
        trials.close()
    outcomes = [ran[number] for number in sorted(ran)]
    rows = [_row(outcome) for outcome in outcomes]
    comparison = compare(rows, plan.metric or default_metric(rows))
    with watches.told(board):
        board.finish(comparison)
    return SweepResult(outcomes, comparison, None if plan.search is None else plan.search.study), held


def _grid(trials: tuple[Trial, ...], base: LaunchOptions, checkpoint: str | None, saving: Mapping[str, Any], write: Write) -> _Trials:
    """A grid's or k-fold's trials: those an earlier run recorded as finished in sweep.json are not run again (--resume);
    every other one's options planned now, so that anything refused is refused before the first starts."""
    resume = saving["resume"]
    record = read_record(checkpoint) if checkpoint is not None else SweepRecord()
    source = _resume_source(checkpoint, resume) if checkpoint is not None and resume else None
    source_record = record if source in (None, checkpoint) else read_record(source)
    for problem in dict.fromkeys(found.problem for found in (record, source_record) if found.problem is not None):
        write(
            "stderr",
            f"tpu_nb: {problem}: read as no record (--resume reruns every trial, each from its checkpoints); replaced as trials end.\n",
        )
    done_before = finished_trials(source_record, trials) if source is not None else {}
    to_run = [trial for trial in trials if trial.number not in done_before]
    options = _plan_trials(base, to_run, checkpoint, saving, write)
    earlier = tuple(
        TrialOutcome(trial, EARLIER, None, None, ({"step": None, **done_before[trial.number]},), None)
        for trial in trials
        if trial.number in done_before
    )
    recorder = () if checkpoint is None else (_Recorder(checkpoint, record, write),)  # a trial's record first: nothing else may cost it
    return _Trials(ListedTrials(to_run), lambda trial: options[trial.number], earlier, recorder, trials, len(trials), lambda: None)


def _search(search: SearchPlan, base: LaunchOptions, checkpoint: str | None, saving: Mapping[str, Any], write: Write) -> _Trials:
    """A search's trials, asked of its study as worlds free; with --resume, the study's finished trials are not run again and
    its unfinished ones run first, each continuing its checkpoints."""
    from tpu_nb.kernel.trials.search import Search, note_running, resume_search  # Optuna: only for a search

    earlier: tuple[TrialOutcome, ...] = ()
    to_run = search.n_trials
    if saving["resume"]:
        resumed = resume_search(search.study, search.n_trials, search.metric, write)
        earlier, to_run = resumed.earlier, resumed.to_run
    else:
        note_running(search.study, write)
    source = Search(search.study, search.space, to_run, search.metric, write)

    def options_for(trial: Trial) -> LaunchOptions:
        return base if checkpoint is None else _search_trial_options(base, trial, checkpoint, saving, write)

    # The study keeps the search's record: no sweep.json, only each trial's values in its directory.
    watches = (source,) if checkpoint is None else (_Recorder(checkpoint, None, write), source)
    return _Trials(source, options_for, earlier, watches, (), len(earlier) + to_run, source.close)


def _row(outcome: TrialOutcome) -> TrialRow:
    speed = outcome.throughput
    tokens, mfu = (None, None) if speed is None else (speed.tokens_per_second, speed.mfu)
    return TrialRow(outcome.trial, outcome.status, outcome.where, outcome.final, outcome.seconds, tokens, mfu)


def _plan_trials(
    base: LaunchOptions, trials: Sequence[Trial], checkpoint: str | None, saving: Mapping[str, Any], write: Write
) -> dict[int, LaunchOptions]:
    """Each trial's options: the sweep's, with checkpoints in its own directory under `checkpoint`, and a resume from the
    checkpoints its values trained (a trial whose values changed starts from scratch; its own directory is moved aside)."""
    if checkpoint is None:
        return {trial.number: base for trial in trials}
    source = _resume_source(checkpoint, saving["resume"])
    options, changed = {}, []
    for trial in trials:
        directory = trial_directory(source, trial)
        trained = trained_with(directory) if saving["resume"] and _has_checkpoints(directory) else None
        if trained is not None and trained.unknown is None and not trained.same_as(trial):
            changed.append((trial, trained))
            continue
        if trained is not None and trained.unknown is not None:
            write(
                "stderr",
                f"tpu_nb: trial #{trial.number} ({trial.label}) continues from {directory}; what trained it cannot be checked: "
                f"{trained.unknown}.\n",
            )
        options[trial.number] = _trial_options(base, trial, checkpoint, source, resumes=trained is not None, saving=saving)
    moved: list[tuple[str, str]] = []
    try:
        for trial, _ in changed:
            if source == checkpoint:  # its checkpoints are in the way of a fresh start: kept, under another name
                directory = trial_directory(source, trial)
                moved.append((directory, _moved_aside(directory)))
            options[trial.number] = _trial_options(base, trial, checkpoint, source, resumes=False, saving=saving)
    except BaseException:
        for directory, aside in reversed(moved):  # a refusal leaves every directory as it was
            move_back(aside, directory)
        raise
    aside_of = dict(moved)
    for trial, trained in changed:
        directory = trial_directory(source, trial)
        fresh = (
            f"moved to {aside_of[directory]}"
            if directory in aside_of
            else f"left as it is; it runs in {trial_directory(checkpoint, trial)}"
        )
        write(
            "stderr",
            f"tpu_nb: trial #{trial.number} ({trial.label}): {directory} was trained with {trained.values}: {fresh}, "
            "and the trial starts from scratch.\n",
        )
    return options


def _search_trial_options(base: LaunchOptions, trial: Trial, checkpoint: str, saving: Mapping[str, Any], write: Write) -> LaunchOptions:
    """A search's trial's options, planned as it starts: with --resume, a trial that runs an unfinished one again continues
    its checkpoints when they trained these values; a directory trained with others is moved aside, and the trial starts
    afresh. `LaunchRefused` (that trial fails) when its directory cannot be planned."""
    source = _resume_source(checkpoint, saving["resume"]) if saving["resume"] else checkpoint
    directory = trial_directory(source, trial)
    try:
        trained = trained_with(directory) if saving["resume"] and _has_checkpoints(directory) else None
    except OSError as error:
        raise refused(f"trial #{trial.number}: {directory} could not be read ({error}).") from None
    resumes = trained is not None
    if trained is not None and trained.unknown is not None:
        write(
            "stderr",
            f"tpu_nb: trial #{trial.number} ({trial.label}) continues from {directory}; what trained it cannot be checked: "
            f"{trained.unknown}.\n",
        )
    elif trained is not None and not trained.same_as(trial):
        resumes = False
        fresh = (
            f"moved to {_moved_aside(directory)}"
            if source == checkpoint
            else f"left as it is; it runs in {trial_directory(checkpoint, trial)}"
        )
        write(
            "stderr",
            f"tpu_nb: trial #{trial.number} ({trial.label}): {directory} was trained with {trained.values}: {fresh}, "
            "and the trial starts from scratch.\n",
        )
    return _trial_options(base, trial, checkpoint, source, resumes=resumes, saving=saving)


def _moved_aside(directory: str) -> str:
    try:
        return move_aside(directory)
    except OSError as error:
        raise refused(
            f"--resume: {directory} was trained with other values and could not be moved aside ({error}): move it away "
            "yourself to start that trial afresh, or give another --checkpoint directory."
        ) from None


def _trial_options(
    base: LaunchOptions, trial: Trial, checkpoint: str, source: str, resumes: bool, saving: Mapping[str, Any]
) -> LaunchOptions:
    """A trial's options: checkpoints in `checkpoint`'s directory of the trial; with `resumes`, from its newest in `source`'s."""
    resume_from: str | bool | None = None
    if resumes:
        resume_from = trial_directory(source, trial) if source != checkpoint else True
    plan = plan_checkpoints(trial_directory(checkpoint, trial), saving["every"], saving["keep"], resume_from, saving["budget"])
    return dataclasses.replace(base, checkpoints=plan)


def _resume_source(checkpoint: str | None, resume: Any) -> str:
    """Where a resumed sweep's trials come from: `--resume DIR`, or its own `--checkpoint`."""
    if isinstance(resume, str) and resume:
        return resume
    assert checkpoint is not None, "a resume without a directory resumes --checkpoint's"
    return checkpoint


def _has_checkpoints(directory: str) -> bool:
    return bool(list_checkpoints(directory))


class _Recorder(TrialWatch):
    """Each trial's values into its directory as it starts, and its end into the sweep's record, so that a resume checks the
    first and skips the finished trials; a directory that refuses either is said once."""

    what = "record"

    def __init__(self, checkpoint: str, record: SweepRecord | None, write: Write) -> None:
        """`record` None: no sweep.json (a search's study is its record)."""
        self._checkpoint = checkpoint
        self._record = record
        self._write = write
        self._refused = False
        self._values_refused = False

    def started(self, trial: Trial, world: World) -> None:
        directory = trial_directory(self._checkpoint, trial)
        try:
            record_values(directory, trial)
        except OSError as error:
            if not self._values_refused:
                self._values_refused = True
                self._write(
                    "stderr",
                    f"tpu_nb: trial #{trial.number}'s values could not be recorded in {directory} ({error}); a --resume cannot "
                    "check what trained its checkpoints.\n",
                )

    def ended(self, outcome: TrialOutcome) -> None:
        if outcome.ending is None or self._record is None:
            return
        self._record = self._record.with_trial(outcome.trial, FINISHED if outcome.status == "done" else outcome.status, outcome.final)
        try:
            write_record(self._checkpoint, self._record)
        except OSError as error:
            if not self._refused:
                self._refused = True
                self._write(
                    "stderr",
                    f"tpu_nb: the sweep's record {record_path(self._checkpoint)} could not be written ({error}); the trials go on, "
                    "and --resume reruns those it does not record.\n",
                )
