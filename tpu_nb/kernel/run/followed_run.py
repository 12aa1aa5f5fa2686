"""A run the notebook follows, on this machine or on a pod slice: one life cycle, one stop/kill/timeout policy.

The thread that follows a run (the main thread for a foreground cell, a
helper thread for a background run) calls `start`, `poll` until `ended`,
`finish` and `close`; any other thread may only ask, through `request_stop`
and `request_kill`. The first interrupt asks every worker to stop at a step
they all reach, and waits as long as a step of this run takes (`stop_wait`);
when none gets there in that time, on a second interrupt, a kill, the
timeout, or when one worker failed (the others would wait for it forever in
a collective), every process is ended at once.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.history.log import LOG_FILE, THROUGHPUT_CURVE, CurveKeeper, append_record, changed_options, log_directory, thinned
from tpu_nb.kernel.history.run_record import RunRecord
from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.notebook.interrupts import interrupts_counted
from tpu_nb.kernel.planning.deadlines import Deadline, StopNeeds
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.progress.display import ProgressDisplay
from tpu_nb.kernel.progress.throughput import Throughput, ThroughputMeter
from tpu_nb.kernel.run.stop_wait import StopClock, StopWait
from tpu_nb.wire.events import Event, Notice
from tpu_nb.wire.stacks import StackReport
from tpu_nb.wire.stop_reason import StopReason

POLL_SECONDS = 0.1

HardStop = Literal["interrupt", "timeout"]
"""Why the kernel ended every process at once (a graceful stop's reason is a `StopReason`)."""


class RunObserver(Protocol):
    """Gets every event of a run, in the kernel, in order."""

    def on_event(self, event: Event) -> None: ...


class FollowedRun(ABC):
    """The life of one run; subclasses say how its processes start, report, stop and end."""

    def __init__(
        self,
        options: LaunchOptions,
        title: str,
        observers: Sequence[RunObserver] = (),
        write: Write = write_to_sys,
        logged: Mapping[str, Any] | None = None,
    ) -> None:
        self.options = options
        self.title = title
        self._write = write
        self._curves = CurveKeeper()  # for the run log's record
        self._speed = ThroughputMeter()  # the run's speed (tokens/s, MFU); its basis is set when the run starts
        self._logged = dict(logged or {})  # what the log's record adds: a sweep's trial and label
        self._observers: list[RunObserver] = [self._curves, self._speed, *observers]
        self._display: ProgressDisplay | None = None
        self._started_at: float | None = None
        self._started_wall = time.time()
        self._stop_requested_at: float | None = None
        self._kill_requested = False
        self._hard_stop: HardStop | None = None
        self._ended = False
        self._deadline: Deadline | None = None  # set by `_start` where the run has one
        self._stop_clock = StopClock(options.stop_grace, options.checkpoints)  # how long a stop waits, learned as the run goes
        self._stop_announced = False
        self._busy_announced: str | None = None  # the long phase last named to the user while the stop waits
        self._stopped_by = StopReason.USER  # who asked the graceful stop, once one was asked

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def stopped_by_deadline(self) -> bool:
        """The run's deadline asked it to stop (a sweep then starts no more trials)."""
        return self._stopped_by is StopReason.DEADLINE

    @property
    def stopped_at_a_step_by(self) -> StopReason | None:
        """Who stopped the run at a step boundary, once its stop reached one; else None."""
        return self._stopped_by if self.stopping and self._stop_reached() else None

    @property
    def stopping(self) -> bool:
        """A graceful stop was asked for."""
        return self._stop_requested_at is not None

    @property
    def stopping_note(self) -> str:
        """What the user is told after a first interrupt: what the stop waits for, and how to stop at once."""
        return self.stop_wait().text(self.options.stop_grace)

    def stop_wait(self) -> StopWait:
        """How long the graceful stop asked for (or one asked now) waits for its step boundary."""
        now = time.monotonic()
        wait = self._stop_clock.wait(self._stop_requested_at or now, now)
        return dataclasses.replace(wait, seconds=wait.seconds + self._stop_ahead)

    @property
    def throughput(self) -> Throughput:
        """The run's speed so far (after warm-up): tokens/s, samples/s, MFU."""
        return self._speed.overall()

    @abstractmethod
    def stacks(self) -> StackReport:
        """Where every rank is now, with a verdict (any thread)."""

    def start(self) -> None:
        """Check, show the dashboard, start the processes: `LaunchRefused` (nothing started) when something is wrong."""
        self._start()
        self._started_at, self._started_wall = time.monotonic(), time.time()
        if self._deadline is not None:
            self._deliver(Notice(0, self._deadline_text()))

    def poll(self) -> None:
        """Deliver events for a moment; notice the end; apply a failure, a kill, the timeout or the stop's grace period."""
        self._take_events(POLL_SECONDS)
        if not self._ended and self._ended_by_itself():
            self._ended = True
        if self._ended:
            return
        assert self._started_at is not None, "poll() is for a started run"
        if self.stopping:
            self._announce_stop()
        now = time.monotonic()
        if self._worker_failed():
            self._end_now(None)
        elif self._kill_requested:
            self._end_now("interrupt")
        elif self.options.timeout is not None and now - self._started_at > self.options.timeout:
            self._end_now("timeout")
        elif self._deadline_passed():
            # Early enough for the last checkpoint: a graceful stop, as on an interrupt.
            self.request_stop(StopReason.DEADLINE)
            saving = ", with a checkpoint" if self.options.checkpoints is not None else ""
            self._write("stderr", f"tpu_nb: stopping now{saving}: {self._deadline_text()}.\n")
        elif self._stop_requested_at is not None and not self._stop_reached() and now > self.stop_wait().until:
            # No step boundary in the time a step takes (a loop without report(), a rank that hangs, a long phase past its
            # bound): stop hard.
            self._write("stderr", f"tpu_nb: {self.stop_wait().overrun_text()}\n")
            self._end_now("interrupt")

    def _announce_stop(self) -> None:
        """Say what the stop waits for once it is asked, and again when a rank enters a long phase it now waits for.

        A heartbeat comes once a second: a stop asked just as an evaluation began was announced with the wait of a
        step, then took as long as the evaluation; the user is told why.
        """
        wait = self.stop_wait()
        phase = None if wait.busy is None else wait.busy.split(" (")[0]  # "compiling", not its changing seconds
        if self._stop_announced and phase in (None, self._busy_announced):
            return
        self._stop_announced, self._busy_announced = True, phase
        self._deliver(Notice(0, self.stopping_note))

    def request_stop(self, by: StopReason = StopReason.USER) -> bool:
        """Graceful stop (any thread), asked `by` the user, the run's deadline or a search's pruner; False if one was already
        asked for (the first stop's reason stays)."""
        if self.stopping:
            return False
        self._stopped_by = by
        self._stop_requested_at = time.monotonic()
        self._ask_to_stop()
        return True

    def request_kill(self) -> None:
        """Hard stop (any thread): the following thread ends every process at its next poll."""
        self._kill_requested = True

    def kill_now(self) -> None:
        """Hard stop from the following thread itself (a second interrupt)."""
        self._end_now("interrupt")

    def finish(self) -> Ending:
        """How the run ended, once `ended`; the dashboard shows it too. The run log's record is written last and
        cannot fail it: the ending holds the results the notebook gets."""
        assert self._ended, "finish() is for a run that has ended"
        ending = self._ending()
        if self._display is not None:
            self._display.finish(ending.status, ending.text)
        self._log(ending)
        return ending

    def _log(self, ending: Ending) -> None:
        """The run's record in the run log; a log that cannot be written is said, never the run's failure.

        The record is JSON-safe whatever the trial holds and a damaged log is read around, so what is left is the
        file itself: the OS refusing it (OSError), or a path or number it cannot take (ValueError: a NUL byte in the
        path, a whole number of more digits than Python writes).
        """
        directory = log_directory(self.options.run_log)
        if directory is None:
            return
        checkpoints = self.options.checkpoints
        speed = self._speed.overall()
        curves = self._curves.curves()
        if self._speed.curve:
            curves[THROUGHPUT_CURVE] = thinned(self._speed.curve)
        record = RunRecord(
            number=0,
            title=self.title,
            started=self._started_wall,
            seconds=self._seconds,
            status=ending.status,
            text=ending.text,
            options=changed_options(self.options, LaunchOptions()),
            trial=self._logged.get("trial"),
            sweep=self._logged.get("sweep"),
            final=dict(self._curves.final),
            best=dict(self._curves.best),
            curves=curves,
            checkpoints=None if checkpoints is None else checkpoints.directory,
            tokens_per_second=speed.tokens_per_second,
            mfu=speed.mfu,
        )
        try:
            append_record(directory, record)
        except (OSError, ValueError) as error:
            self._write(
                "stderr",
                f"tpu_nb: the run log {directory / LOG_FILE} could not be written ({error}): this run is not in it, its results "
                "are not affected; give another --run-log DIR, or --run-log off to turn it off.\n",
            )

    def close(self) -> None:
        """Leave nothing running (after an unexpected error too) and free what the run held."""
        if self._started_at is not None and not self._ended:
            self._end_now("interrupt")
        self._release()

    def _end_now(self, reason: HardStop | None) -> None:
        """End every process now, even if the user keeps pressing interrupt. `reason` None: a worker failed."""
        if self._hard_stop is None and reason is not None:
            self._hard_stop = reason
        while True:
            try:
                self._end_everything()
                break
            except KeyboardInterrupt:
                continue
        self._ended = True

    def _deadline_passed(self) -> bool:
        deadline = self._deadline
        return deadline is not None and not self.stopping and time.time() >= deadline.stop_at(self._stop_needs(), self._started_wall)

    def _deadline_text(self) -> str:
        assert self._deadline is not None
        return self._deadline.describe(self._stop_needs(), self._started_wall, saves=self.options.checkpoints is not None)

    def _stop_needs(self) -> StopNeeds:
        """What a stop and its last checkpoint take in this run, as measured so far: how early a deadline's stop comes."""
        clock = self._stop_clock
        # What the steps after warm-up take, not --stop-grace's floor: a run of quick steps stops in a moment.
        planned = clock.planned(time.monotonic())
        stop = None if planned is None else planned + self._stop_ahead
        return StopNeeds(stop, clock.longest_save_written if self.options.checkpoints is not None else None)

    def _deliver(self, event: Event) -> None:
        self._stop_clock.on_event(event, time.monotonic())
        for observer in self._observers:
            observer.on_event(event)

    @property
    def _stop_ahead(self) -> float:
        """Seconds a stop takes to reach the processes (beyond the step boundary): none on this machine."""
        return 0.0

    @property
    def _seconds(self) -> float:
        return 0.0 if self._started_at is None else time.monotonic() - self._started_at

    @abstractmethod
    def _start(self) -> None:
        """Check and start the processes (the dashboard, if any, first)."""

    @abstractmethod
    def _take_events(self, timeout: float) -> None:
        """Deliver what the processes sent within `timeout` seconds."""

    @abstractmethod
    def _ended_by_itself(self) -> bool:
        """The processes ended without being ended (success, a failure, a death); take what they left."""

    @abstractmethod
    def _worker_failed(self) -> bool:
        """A worker (or host) failed, so the others must be ended."""

    @abstractmethod
    def _stop_reached(self) -> bool:
        """The graceful stop reached its step boundary (so the grace period no longer applies)."""

    @abstractmethod
    def _ask_to_stop(self) -> None:
        """Deliver the graceful stop to the processes, with its reason (`_stopped_by`)."""

    @abstractmethod
    def _end_everything(self) -> None:
        """End every process of the run and take what they sent until then."""

    @abstractmethod
    def _ending(self) -> Ending:
        """How the run ended, in words and as the notebook's exception (`endings.ending_of`)."""

    @abstractmethod
    def _release(self) -> None:
        """Free what the run held once it is over: files, the kernel's one-run slot, helper processes."""


def run_in_foreground(run: FollowedRun) -> Ending:
    """Run in this thread. The first interrupt stops gracefully, a second one at once.

    Once the run has started, interrupts are taken between polls, never in the middle of one (`interrupts`).
    """
    try:
        run.start()
        with interrupts_counted() as interrupts:
            while not run.ended:
                try:
                    run.poll()
                    interrupted = interrupts.take()
                except KeyboardInterrupt:  # where interrupts cannot be counted (not the main thread)
                    interrupted = 1
                for _ in range(interrupted):
                    if run.request_stop():
                        print(f"tpu_nb: {run.stopping_note}", file=sys.stderr)
                    else:
                        run.kill_now()
                        break
            return run.finish()
    finally:
        run.close()
