"""A sweep: its trials run side by side, a world of the host's chips each; more trials than worlds wait for one to free.

Each trial is a `Run` of its own (its own supervisor and workers, no
collective with another trial), bound to its world's chips; the sweep holds
the kernel's one run slot for all of them and follows them in this thread.
A trial that fails ends alone and the others go on. The first interrupt
stops every running trial at its next step boundary (as one run's does) and
starts no queued one; a second one ends them all at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.history.log import sweep_label
from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.notebook.interrupts import interrupts_counted
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.planning.worlds import World
from tpu_nb.kernel.run.background import MetricsLog
from tpu_nb.kernel.run.followed_run import RunObserver
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.kernel.trials.spec import Trial
from tpu_nb.wire.events import Event
from tpu_nb.workers.programs import Program

NOT_STARTED = "not started"


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """How one trial ended: its status, where it ran, its ending (None if it never started) and what it reported."""

    trial: Trial
    status: str
    where: str | None
    ending: Ending | None
    metrics: tuple[Mapping[str, Any], ...]
    seconds: float | None

    @property
    def final(self) -> Mapping[str, float]:
        """The last value of every metric the trial reported."""
        last: dict[str, float] = {}
        for row in self.metrics:
            last.update({name: value for name, value in row.items() if name not in ("step", "epoch") and isinstance(value, int | float)})
        return MappingProxyType(last)

    @property
    def error(self) -> BaseException | None:
        return None if self.ending is None else self.ending.error


class TrialWatch:
    """What the sweep's display is told about one trial, as it runs."""

    def started(self, trial: Trial, world: World) -> None: ...
    def on_event(self, trial: Trial, event: Event) -> None: ...
    def ended(self, outcome: TrialOutcome) -> None: ...
    def refresh(self) -> None: ...


class Watches(TrialWatch):
    """Several watches told the same."""

    def __init__(self, *watches: TrialWatch) -> None:
        self._watches = watches

    def started(self, trial: Trial, world: World) -> None:
        for watch in self._watches:
            watch.started(trial, world)

    def on_event(self, trial: Trial, event: Event) -> None:
        for watch in self._watches:
            watch.on_event(trial, event)

    def ended(self, outcome: TrialOutcome) -> None:
        for watch in self._watches:
            watch.ended(outcome)

    def refresh(self) -> None:
        for watch in self._watches:
            watch.refresh()


@dataclass
class _Active:
    trial: Trial
    world: World
    run: Run
    metrics: MetricsLog
    started: float


class _Forwarded:
    """A trial's events, passed to the sweep's watch with the trial they belong to."""

    def __init__(self, trial: Trial, watch: TrialWatch) -> None:
        self._trial, self._watch = trial, watch

    def on_event(self, event: Event) -> None:
        self._watch.on_event(self._trial, event)


class Sweep:
    """Trials run in `worlds`, at most one per world at a time, in trial order; `run()` follows them to the end."""

    def __init__(
        self,
        trials: Sequence[Trial],
        program_for: Callable[[Trial], Program],
        options_for: Callable[[Trial], LaunchOptions],
        worlds: Sequence[World],
        title: str,
        watch: TrialWatch | None = None,
        write: Write = write_to_sys,
    ) -> None:
        self.trials = tuple(trials)
        self.title = title
        self._program_for = program_for
        self._options_for = options_for
        self._worlds = tuple(worlds)
        self._watch = watch or TrialWatch()
        self._write = write
        self._stopping = False
        self._deadline_came = False  # a trial was stopped by the deadline they share: no queued one starts
        self._label = sweep_label(title)

    def run(self) -> tuple[TrialOutcome, ...]:
        """Run every trial (LaunchRefused, with nothing started, when the first cannot start); each one's outcome, in trial order."""
        Run.hold(self)
        queue = list(self.trials)
        free = list(self._worlds)
        active: list[_Active] = []
        outcomes: dict[int, TrialOutcome] = {}
        try:
            with interrupts_counted() as interrupts:
                while queue or active:
                    if queue and self._deadline_came:
                        self._drop(queue, outcomes, "its deadline came")
                    while queue and free and not self._stopping:
                        trial, world = queue.pop(0), free.pop(0)
                        started = self._start(trial, world, first=not outcomes and not active)
                        if isinstance(started, TrialOutcome):
                            outcomes[trial.number] = started
                            free.insert(0, world)
                        else:
                            active.append(started)
                    for entry in list(active):
                        try:
                            entry.run.poll()
                            interrupted = interrupts.take()
                        except KeyboardInterrupt:  # where interrupts cannot be counted (not the main thread)
                            interrupted = 1
                        if entry.run.ended:
                            outcomes[entry.trial.number] = self._finish(entry)
                            active.remove(entry)
                            free.append(entry.world)
                            free.sort(key=lambda world: world.index)
                        for _ in range(interrupted):
                            self._interrupt(active, queue, outcomes)
                    self._watch.refresh()
        finally:
            for entry in active:
                entry.run.close()  # ends what is still running (an error in tpu_nb itself)
            Run.let_go(self)
        return tuple(outcomes[trial.number] for trial in self.trials)

    def _start(self, trial: Trial, world: World, first: bool) -> _Active | TrialOutcome:
        metrics = MetricsLog()
        observers: list[RunObserver] = [metrics, _Forwarded(trial, self._watch)]
        logged = {"trial": dict(trial.values), "sweep": self._label}
        title = f"{self.title} trial #{trial.number}"
        run = Run(self._program_for(trial), self._options_for(trial), title, observers, _prefixed(self._write, trial), world, logged)
        try:
            run.start()
        except LaunchRefused as refusal:
            run.close()
            if first:
                raise  # what is wrong is wrong for every trial: said once, nothing started
            return TrialOutcome(trial, "failed", world.label, Ending("failed", str(refusal), refusal), (), None)
        self._watch.started(trial, world)
        return _Active(trial, world, run, metrics, time.monotonic())

    def _finish(self, entry: _Active) -> TrialOutcome:
        try:
            ending = entry.run.finish()
        finally:
            entry.run.close()
        self._deadline_came = self._deadline_came or entry.run.stopped_by_deadline
        outcome = TrialOutcome(
            entry.trial, ending.status, entry.world.label, ending, tuple(entry.metrics.rows), time.monotonic() - entry.started
        )
        if ending.status == "failed":  # its traceback; the other trials go on
            self._write("stderr", f"tpu_nb: trial #{entry.trial.number} ({entry.trial.label}) failed: {ending.error or ending.text}\n")
        self._watch.ended(outcome)
        return outcome

    def _drop(self, queue: list[Trial], outcomes: dict[int, TrialOutcome], why: str | None) -> None:
        """The queued trials will not start (an interrupt, or `why`)."""
        if why is not None:
            self._write("stderr", f"tpu_nb: {why}: {len(queue)} queued trial(s) not started (--resume runs them later).\n")
        for trial in queue:
            outcomes[trial.number] = TrialOutcome(trial, NOT_STARTED, None, None, (), None)
            self._watch.ended(outcomes[trial.number])
        queue.clear()

    def _interrupt(self, active: list[_Active], queue: list[Trial], outcomes: dict[int, TrialOutcome]) -> None:
        """First interrupt: every running trial stops at its next step boundary, no queued one starts. Second: all end now."""
        if not self._stopping:
            self._stopping = True
            self._drop(queue, outcomes, None)
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
    at_line_start: dict[str, bool] = {}

    def prefixed(stream: str, text: str) -> None:
        if not text:
            return
        start = at_line_start.get(stream, True)
        lines = text.splitlines(keepends=True)
        out = "".join((f"[trial {trial.number}] " if index or start else "") + line for index, line in enumerate(lines))
        at_line_start[stream] = text.endswith("\n")
        write(stream, out)

    return prefixed
