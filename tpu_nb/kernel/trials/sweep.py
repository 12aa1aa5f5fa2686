"""A sweep: its trials run side by side, a world of the host's chips each; more trials than worlds wait for one to free.

Each trial is a `Run` of its own (its own supervisor and workers, no
collective with another trial), bound to its world's chips; the sweep holds
the kernel's one run slot for all of them and follows them in this thread.
The trials come from a `TrialSource`, asked for the next one whenever a
world frees: a list (a grid, folds), or a study that chooses each from the
trials that ended (a search, `search.py`), which may also stop a running
trial at its next step boundary (its pruner). A trial that fails ends alone
and the others go on. The first interrupt stops every running trial at its
next step boundary (as one run's does) and starts no queued one; a second
one ends them all at once.

Each trial is a fault domain of its own: what goes wrong starting it,
following it, reading its end or cleaning up after it fails that trial
alone, with the reason, and a failing watch (the board, the record) is said
once and the trials go on. A finished trial's outcome is kept before anyone
is told of it. Only an error in the sweep's own bookkeeping ends the sweep,
and then the trials that finished are listed first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.history.log import sweep_label
from tpu_nb.kernel.notebook.cell_output import LinePrefixer, Write, write_to_sys
from tpu_nb.kernel.notebook.interrupts import interrupts_counted
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.planning.worlds import World
from tpu_nb.kernel.progress.throughput import Throughput
from tpu_nb.kernel.run.background import MetricsLog
from tpu_nb.kernel.run.followed_run import RunObserver
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.kernel.trials.spec import Trial
from tpu_nb.wire.events import Event
from tpu_nb.wire.stop_reason import StopReason
from tpu_nb.workers.processes.programs import Program

NOT_STARTED = "not started"
TRIAL_FAULTS = (OSError, ValueError, TypeError, LookupError, ArithmeticError)
"""What one trial's run can raise once started, reading what its workers left (files, JSON) and appending to the run log."""


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """How one trial ended: its status, where it ran, its ending (None if it never started) and what it reported."""

    trial: Trial
    """Its number (`trial.number`) and values (`trial.values`, e.g. {'fold': 2})."""
    status: str
    """How it ended: "done", "stopped", "pruned", "failed", "interrupted", "timeout", or "not started"; a trial finished
    before `--resume`: "done earlier" (a grid's or a search's), and a search's "pruned earlier" or "failed earlier"."""
    where: str | None
    """Where it ran, e.g. "chip 3", "chips 4-7", "cpu 2"; None where it never ran."""
    ending: Ending | None
    """How its run ended (its results, its error); None if it never started."""
    metrics: tuple[Mapping[str, Any], ...]
    """Every row it reported (`report(...)`, a Trainer's logs), in order."""
    seconds: float | None
    """How long it ran; None where it never ran."""
    throughput: Throughput | None = None
    """Its speed after warm-up (tokens/s, MFU); None where it never ran."""

    @property
    def final(self) -> Mapping[str, float]:
        """The last value of every metric the trial reported."""
        return final_of(self.metrics)

    @property
    def error(self) -> BaseException | None:
        """What ended it with an error (a `WorkerError`, `WorkerDied`, ...); None otherwise."""
        return None if self.ending is None else self.ending.error


def final_of(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, float]:
    """The last value of every metric in a trial's reported rows."""
    last: dict[str, float] = {}
    for row in rows:
        last.update({name: value for name, value in row.items() if name not in ("step", "epoch") and isinstance(value, int | float)})
    return MappingProxyType(last)


class Returns(Protocol):
    """What keeps a sweep's `--return` values apart from its outcomes (`sweep_returns.HeldReturns`)."""

    def to_load(self, trial: Trial, final: Mapping[str, float], status: str) -> Collection[str]:
        """Trial `trial`'s results came back (it reported `final`, it ends `status`): the `--return` names to load."""

    def take(self, outcome: TrialOutcome) -> TrialOutcome:
        """Keep what the ended trial returned that is wanted; its outcome without any returned value."""


@dataclass(frozen=True, slots=True)
class Dropped:
    """What a source lets go when no more trials may start: the trials it had queued, and how many it would still have given."""

    trials: tuple[Trial, ...]
    left: int


@dataclass(frozen=True, slots=True)
class StopAsked:
    """A source wants a running trial stopped at its next step boundary: `by` whom (a search's pruner), and why."""

    by: StopReason
    why: str


class TrialNotMade(Exception):
    """The source took a trial whose values it could not make (a search's space raised): that trial failed before it started."""

    def __init__(self, outcome: TrialOutcome, error: BaseException) -> None:
        super().__init__(str(error))
        self.outcome = outcome
        self.error = error


class TrialSource(Protocol):
    """Where a sweep's trials come from, one at a time, as worlds free."""

    def take(self) -> Trial | None:
        """The next trial to start; None when there are no more; `TrialNotMade` for a trial that failed as it was made."""

    def drop(self) -> Dropped:
        """No more trials will be taken (an interrupt, the deadline): what is let go."""

    def stop_for(self, trial: Trial) -> StopAsked | None:
        """Whether running trial `trial` is to stop at its next step boundary now (a search's pruner said so)."""


class ListedTrials:
    """Trials known before the sweep starts (a grid, folds, a list), taken in their order."""

    def __init__(self, trials: Sequence[Trial]) -> None:
        self._queue = list(trials)

    def take(self) -> Trial | None:
        return self._queue.pop(0) if self._queue else None

    def drop(self) -> Dropped:
        dropped, self._queue = tuple(self._queue), []
        return Dropped(dropped, len(dropped))

    def stop_for(self, trial: Trial) -> StopAsked | None:
        return None


class TrialWatch:
    """What the sweep's display is told about one trial, as it runs."""

    what = "display"
    """What the user knows it as, for a warning when it fails."""

    def started(self, trial: Trial, world: World) -> None: ...
    def on_event(self, trial: Trial, event: Event) -> None: ...
    def ended(self, outcome: TrialOutcome) -> None: ...
    def refresh(self) -> None: ...


class Watches(TrialWatch):
    """Several watches told the same, in order, each on its own: one that fails is said once and the others are still told."""

    def __init__(self, watches: Sequence[TrialWatch] = (), write: Write = write_to_sys) -> None:
        self._watches = tuple(watches)
        self._write = write
        self._failed: set[int] = set()

    def started(self, trial: Trial, world: World) -> None:
        for watch in self._watches:
            with self.told(watch):
                watch.started(trial, world)

    def on_event(self, trial: Trial, event: Event) -> None:
        for watch in self._watches:
            with self.told(watch):
                watch.on_event(trial, event)

    def ended(self, outcome: TrialOutcome) -> None:
        for watch in self._watches:
            with self.told(watch):
                watch.ended(outcome)

    def refresh(self) -> None:
        for watch in self._watches:
            with self.told(watch):
                watch.refresh()

    @contextmanager
    def told(self, watch: TrialWatch) -> Iterator[None]:
        """Around telling `watch` anything: what it raises is said (once), not passed on."""
        try:
            yield
        # A watch only shows or records: whatever it raises (a frontend's display call, a chart's drawing, a file) must
        # not reach the trials' runs, which it would end. It is said once, with the error, and kept being told.
        except Exception as error:  # noqa: BLE001
            if id(watch) not in self._failed:
                self._failed.add(id(watch))
                self._write("stderr", f"tpu_nb: the sweep's {watch.what} failed ({type(error).__name__}: {error}); the trials go on.\n")


@dataclass
class _Active:
    trial: Trial
    world: World
    run: Run
    metrics: MetricsLog
    started: float
    fault: BaseException | None = None
    """What went wrong following it (then it is ended and failed)."""


class _Forwarded:
    """A trial's events, passed to the sweep's watch with the trial they belong to."""

    def __init__(self, trial: Trial, watch: TrialWatch) -> None:
        self._trial, self._watch = trial, watch

    def on_event(self, event: Event) -> None:
        self._watch.on_event(self._trial, event)


class Sweep:
    """Trials run in `worlds`, at most one per world at a time, in the order their source gives them; `run()` follows them
    to the end."""

    def __init__(
        self,
        trials: TrialSource,
        program_for: Callable[[Trial], Program],
        options_for: Callable[[Trial], LaunchOptions],
        worlds: Sequence[World],
        title: str,
        watches: Watches | None = None,
        write: Write = write_to_sys,
        returns: Returns | None = None,
    ) -> None:
        self._trials = trials
        self.title = title
        self._program_for = program_for
        self._options_for = options_for
        self._worlds = tuple(worlds)
        self._watch = watches or Watches((), write)
        self._write = write
        self._returns = returns  # None: a trial's outcome keeps all it returned
        self._stopping = False
        self._exhausted = False  # the source has no more trials, or no more may start
        self._deadline_came = False  # a trial was stopped by the deadline they share: no queued one starts
        self._label = sweep_label(title)

    def run(self) -> tuple[TrialOutcome, ...]:
        """Run every trial (LaunchRefused, with nothing started, when the first cannot start); each one's outcome, by number."""
        Run.hold(self)
        free = list(self._worlds)
        active: list[_Active] = []
        outcomes: dict[int, TrialOutcome] = {}
        try:
            with interrupts_counted() as interrupts:
                while not self._exhausted or active:
                    if self._deadline_came and not self._exhausted:
                        self._drop(outcomes, "its deadline came")
                    while free and not self._exhausted:
                        first = not outcomes and not active
                        trial = self._take(first, outcomes)
                        if trial is None:
                            continue
                        world = free.pop(0)
                        started = self._start(trial, world, first)
                        if isinstance(started, TrialOutcome):
                            self._ended(started, outcomes)
                            free.insert(0, world)
                        else:
                            active.append(started)
                    for entry in list(active):
                        try:
                            entry.run.poll()
                            interrupted = interrupts.take()
                        except KeyboardInterrupt:  # where interrupts cannot be counted (not the main thread)
                            interrupted = 1
                        except TRIAL_FAULTS as fault:
                            entry.fault, interrupted = fault, 0
                        if entry.run.ended or entry.fault is not None:
                            # Not bound to a name: what the trial returned must not outlive its hand-over to `_returns`.
                            self._ended(self._finish(entry), outcomes)
                            active.remove(entry)  # after: a sweep that breaks in `_finish` still closes it
                            free.append(entry.world)
                            free.sort(key=lambda world: world.index)
                        else:
                            self._stop_if_asked(entry)
                        for _ in range(interrupted):
                            self._interrupt(active, outcomes)
                    self._watch.refresh()
        except BaseException:
            if outcomes or active:  # an error in the sweep itself: what finished is said before its traceback
                self._say_what_finished(outcomes, len(active))
            raise
        finally:
            for entry in active:
                self._close(entry)  # ends what is still running
            Run.let_go(self)
        return tuple(outcomes[number] for number in sorted(outcomes))

    def _take(self, first: bool, outcomes: dict[int, TrialOutcome]) -> Trial | None:
        """The source's next trial (None: none now; then the source is exhausted, or the trial it took failed as it was made)."""
        try:
            trial = self._trials.take()
        except TrialNotMade as problem:
            if first:
                raise problem.error from None  # the user's own code (a search's space) is wrong: its traceback, nothing started
            self._ended(problem.outcome, outcomes)
            return None
        if trial is None:
            self._exhausted = True
        return trial

    def _start(self, trial: Trial, world: World, first: bool) -> _Active | TrialOutcome:
        metrics = MetricsLog()
        observers: list[RunObserver] = [metrics, _Forwarded(trial, self._watch)]
        logged = {"trial": dict(trial.values), "sweep": self._label}
        title = f"{self.title} trial #{trial.number}"
        returns = self._returns

        def to_load() -> Collection[str]:
            assert returns is not None
            return returns.to_load(trial, final_of(metrics.rows), "pruned" if run.stopped_at_a_step_by is StopReason.PRUNED else "done")

        write = _prefixed(self._write, trial)
        try:
            # A search plans a trial's checkpoints as it starts: a directory the system refuses to move aside fails it.
            program, options = self._program_for(trial), self._options_for(trial)
        except LaunchRefused as refusal:
            if first:
                raise
            return TrialOutcome(trial, "failed", world.label, Ending("failed", str(refusal), refusal), (), None)
        run = Run(program, options, title, observers, write, world, logged, None if returns is None else to_load)
        try:
            run.start()
        except LaunchRefused as refusal:
            self._close(_Active(trial, world, run, metrics, time.monotonic()))
            if first:
                raise  # what is wrong is wrong for every trial: said once, nothing started
            return TrialOutcome(trial, "failed", world.label, Ending("failed", str(refusal), refusal), (), None)
        except OSError as error:  # the system refused it a process, a pipe, a directory: this trial fails, the others go on
            self._close(_Active(trial, world, run, metrics, time.monotonic()))
            return self._failed(trial, world.label, "could not start it", error, (), None)
        self._watch.started(trial, world)
        return _Active(trial, world, run, metrics, time.monotonic())

    def _finish(self, entry: _Active) -> TrialOutcome:
        """The outcome of a trial whose run ended (or could not be followed), its run closed."""
        ending, fault, what = None, entry.fault, "could not follow it"
        if fault is None:
            try:
                ending = entry.run.finish()
            except TRIAL_FAULTS as error:
                fault, what = error, "could not read how it ended"
        self._close(entry)
        self._deadline_came = self._deadline_came or entry.run.stopped_by_deadline
        rows, seconds = tuple(entry.metrics.rows), time.monotonic() - entry.started
        if ending is None:
            assert fault is not None
            return self._failed(entry.trial, entry.world.label, what, fault, rows, seconds)
        if ending.status == "failed":  # its traceback; the other trials go on
            self._write("stderr", f"tpu_nb: trial #{entry.trial.number} ({entry.trial.label}) failed: {ending.error or ending.text}\n")
        return TrialOutcome(entry.trial, ending.status, entry.world.label, ending, rows, seconds, entry.run.throughput)

    def _failed(
        self, trial: Trial, where: str | None, what: str, error: BaseException, rows: tuple[Mapping[str, Any], ...], seconds: float | None
    ) -> TrialOutcome:
        """A trial that tpu_nb itself could not carry (start, follow, read its end): failed, with the reason, said."""
        text = f"tpu_nb {what}: {type(error).__name__}: {error}"
        self._write("stderr", f"tpu_nb: trial #{trial.number} ({trial.label}) failed: {text}\n")
        return TrialOutcome(trial, "failed", where, Ending("failed", text, error), rows, seconds)

    def _close(self, entry: _Active) -> None:
        """End what is left of the trial's run and free what it held; a failure to is said, and the sweep goes on."""
        try:
            entry.run.close()
        except TRIAL_FAULTS as error:
            self._write(
                "stderr", f"tpu_nb: trial #{entry.trial.number}'s run could not be cleaned up after ({type(error).__name__}: {error}).\n"
            )

    def _ended(self, outcome: TrialOutcome, outcomes: dict[int, TrialOutcome]) -> None:
        """Keep the trial's outcome (its returned values apart), then tell the watches (its record first)."""
        if self._returns is not None:
            outcome = self._returns.take(outcome)
        outcomes[outcome.trial.number] = outcome
        self._watch.ended(outcome)

    def _say_what_finished(self, outcomes: Mapping[int, TrialOutcome], running: int) -> None:
        ended = "; ".join(
            f"#{number} {outcome.status}" + "".join(f" {name}={value:.6g}" for name, value in outcome.final.items())
            for number, outcome in sorted(outcomes.items())
        )
        self._write(
            "stderr",
            f"tpu_nb: the sweep stopped on an error in tpu_nb itself (below); {len(outcomes)} trial(s) had ended"
            + (f" ({ended})" if ended else "")
            + f", {running} running trial(s) were ended. A sweep with --checkpoint recorded those that ended: --resume runs the rest.\n",
        )

    def _drop(self, outcomes: dict[int, TrialOutcome], why: str | None) -> None:
        """No queued trial will start (an interrupt, or `why`)."""
        self._exhausted = True
        dropped = self._trials.drop()
        if why is not None and dropped.left:
            self._write("stderr", f"tpu_nb: {why}: {dropped.left} queued trial(s) not started (--resume runs them later).\n")
        for trial in dropped.trials:
            self._ended(TrialOutcome(trial, NOT_STARTED, None, None, (), None), outcomes)

    def _stop_if_asked(self, entry: _Active) -> None:
        """A running trial its source wants stopped (a search's pruner) stops at its next step boundary, as on an interrupt."""
        asked = self._trials.stop_for(entry.trial)
        if asked is not None and not self._stopping and entry.run.request_stop(asked.by):
            self._write(
                "stderr",
                f"tpu_nb: trial #{entry.trial.number} ({entry.trial.label}) {asked.why}: it stops at its next step boundary, and "
                "its chip takes the next trial.\n",
            )

    def _interrupt(self, active: list[_Active], outcomes: dict[int, TrialOutcome]) -> None:
        """First interrupt: every running trial stops at its next step boundary, no queued one starts. Second: all end now."""
        if not self._stopping:
            self._stopping = True
            self._drop(outcomes, None)
            for entry in active:
                entry.run.request_stop()
            self._write(
                "stderr",
                f"tpu_nb: stopping {len(active)} running trial(s) at their next step boundary; the queued ones will not start. "
                "Interrupt again to end them at once.\n",
            )
            return
        for entry in active:
            entry.run.kill_now()


def _prefixed(write: Write, trial: Trial) -> Write:
    """The trial's printed lines, each begun with its number: trials print side by side."""
    prefixer = LinePrefixer(f"[trial {trial.number}] ")

    def prefixed(stream: str, text: str) -> None:
        if text:
            write(stream, prefixer(stream, text))

    return prefixed
