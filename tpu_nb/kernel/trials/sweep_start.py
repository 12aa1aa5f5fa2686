"""From `--trials` to a finished sweep: the trials read, the worlds planned, each trial's options (its own checkpoints), the run.

`%%tpu_train --trials` and `tpu_nb.launch(..., trials=...)` both come here.
Everything that can be refused is checked before the first trial starts.
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
from tpu_nb.kernel.trials.spec import Trial, TrialSpecError, parse_trials
from tpu_nb.kernel.trials.sweep import Sweep, TrialOutcome, TrialWatch, Watches
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
from tpu_nb.workers.programs import Program

EARLIER = "done earlier"
"""A trial a resumed sweep did not rerun: an earlier run of the sweep finished it."""
CHECKPOINT_OPTIONS = ("checkpoint", "every", "keep", "budget", "resume")


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """The trials, how many cores each gets, and what compares them."""

    trials: tuple[Trial, ...]
    cores_per_trial: int
    metric: MetricChoice | None


def plan_sweep(trials: Any, cores_per_trial: int, metric: str | None, namespace: Mapping[str, Any] | None = None) -> SweepPlan:
    """The sweep `--trials`, `--cores-per-trial` and `--trials-metric` ask for; `LaunchRefused` with the fix."""
    try:
        return SweepPlan(parse_trials(trials, namespace), cores_per_trial, None if metric is None else MetricChoice.parse(metric))
    except (TrialSpecError, MetricError) as error:
        raise refused(str(error)) from None


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
    if checkpoint is None:
        plan_checkpoints(None, saving["every"], saving["keep"], resume, saving["budget"])  # refuses what needs --checkpoint
    record = read_record(checkpoint) if checkpoint is not None else SweepRecord()
    source = _resume_source(checkpoint, resume) if checkpoint is not None and resume else None
    source_record = record if source in (None, checkpoint) else read_record(source)
    for problem in dict.fromkeys(found.problem for found in (record, source_record) if found.problem is not None):
        write(
            "stderr",
            f"tpu_nb: {problem}: read as no record (--resume reruns every trial, each from its checkpoints); replaced as trials end.\n",
        )
    done_before = finished_trials(source_record, plan.trials) if source is not None else {}
    to_run = [trial for trial in plan.trials if trial.number not in done_before]
    options = _plan_trials(base, to_run, checkpoint, saving, write)
    board = SweepBoard(plan.trials, worlds, None if plan.metric is None else plan.metric.name, title, write, shown=options_given.progress)
    earlier = [
        TrialOutcome(trial, EARLIER, None, None, ({"step": None, **done_before[trial.number]},), None)
        for trial in plan.trials
        if trial.number in done_before
    ]
    shown: list[TrialWatch] = [board]
    if checkpoint is not None:
        shown.insert(0, _Recorder(checkpoint, record, write))  # a trial's record first: nothing else may cost it
    watches = Watches(shown, write)
    for outcome in earlier:
        watches.ended(outcome)
    held = HeldReturns(returns, return_best, plan.metric, [_row(outcome) for outcome in earlier])
    sweep = Sweep(to_run, program_for, lambda trial: options[trial.number], worlds, title, watches, write, held)
    ran = {outcome.trial.number: outcome for outcome in [*earlier, *sweep.run()]}
    outcomes = [ran[trial.number] for trial in plan.trials]
    rows = [_row(outcome) for outcome in outcomes]
    comparison = compare(rows, plan.metric or default_metric(rows))
    with watches.told(board):
        board.finish(comparison)
    return SweepResult(outcomes, comparison), held


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

    def __init__(self, checkpoint: str, record: SweepRecord, write: Write) -> None:
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
        if outcome.ending is None:
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
