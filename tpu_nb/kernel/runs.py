"""One run from the kernel: checks, start, events, timeout, graceful and hard stops, its ending.

`Run` is the only owner of a run's state. The thread that follows a run (the
main thread for a foreground cell, a helper thread for a background run)
calls `poll` and `finish`; any other thread may only ask, through
`request_stop` and `request_kill`. One run at a time per kernel: TPU devices
cannot be shared between two sets of workers.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Sequence
from typing import ClassVar, Literal, Protocol

from tpu_nb.runtime import detect
from tpu_nb.wire.events import Event, Stopping, WorkerRaised, WorkerStarted
from tpu_nb.wire.stop_request import StopRequest
from tpu_nb.workers.programs import Program

from .endings import Died, Ending, Outcome, Stopped, collect, ending_of
from .options import LaunchOptions
from .output import OutputPrinter, Write, write_to_sys
from .preflight import check_can_launch
from .processes import WorkerProcesses
from .progress.display import ProgressDisplay, make_display

POLL_SECONDS = 0.1


class RunObserver(Protocol):
    """Gets every event of a run, in the kernel, in order."""

    def on_event(self, event: Event) -> None: ...


class _EventFacts:
    """What the kernel learns about the workers from their events."""

    def __init__(self) -> None:
        self.ranks_by_pid: dict[int, int] = {}
        self.world_size: int | None = None
        self.first_raising_rank: int | None = None
        self.last_step: int | None = None  # rank 0's
        self.stopping_step: int | None = None  # where rank 0 stopped gracefully

    def on_event(self, event: Event) -> None:
        if isinstance(event, WorkerStarted):
            self.ranks_by_pid[event.pid] = event.rank
            self.world_size = event.world_size
        elif isinstance(event, WorkerRaised) and self.first_raising_rank is None:
            self.first_raising_rank = event.rank
        elif isinstance(event, Stopping) and event.rank == 0:
            self.stopping_step = event.step
        step = getattr(event, "step", None)
        if step is not None and getattr(event, "rank", None) == 0:
            self.last_step = step


class Run:
    """One launch, from its checks to its ending."""

    _alive: ClassVar[Run | None] = None

    def __init__(
        self,
        program: Program,
        options: LaunchOptions,
        title: str,
        observers: Sequence[RunObserver] = (),
        write: Write = write_to_sys,
    ) -> None:
        self.program = program
        self.options = options
        self.title = title
        self._observers = list(observers)
        self._write = write
        self._processes = WorkerProcesses()
        self._facts = _EventFacts()
        self._display: ProgressDisplay | None = None
        self._stop_request: StopRequest | None = None
        self._started_at = 0.0
        self._stop_requested_at: float | None = None
        self._kill_requested = False
        self._stop_reason: Literal["interrupt", "timeout"] | None = None
        self._ended = False

    @classmethod
    def alive(cls) -> str | None:
        """The title of the run alive in this kernel, if any."""
        return None if cls._alive is None else cls._alive.title

    def start(self) -> None:
        """Check, show the display, fork: `LaunchRefused` (nothing started) when something is wrong."""
        info = detect()
        environment = check_can_launch(info, self.options, running=Run.alive())
        for note in environment.notes:
            self._write("stderr", note + "\n")
        if self.options.progress:
            workers = 1 if self.options.spmd else environment.devices  # SPMD: one worker drives them all
            self._display = make_display(self.title, info.label, workers)
        observers: list[RunObserver] = [OutputPrinter(self.options.all_ranks_output, self._write), self._facts, *self._observers]
        self._observers = observers + ([self._display] if self._display is not None else [])
        self._stop_request = StopRequest(environment.devices)
        Run._alive = self
        try:
            mesh = self.options.mesh_for(environment.devices) if self.options.spmd else None
            self._processes.start(
                self.program,
                environment,
                self._stop_request,
                self.options.all_results,
                mesh,
                doctor=self.options.doctor,
                compile_cache=self.options.compile_cache_for(info),
            )
        except BaseException:
            Run._alive = None
            raise
        self._started_at = time.monotonic()

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def stopping(self) -> bool:
        """A graceful stop was asked for."""
        return self._stop_requested_at is not None

    @property
    def stopping_note(self) -> str:
        """What the user is told after a first interrupt."""
        return f"stopping after the next step every worker reaches (within {self.options.stop_grace:g}s; interrupt again to stop at once)."

    def poll(self) -> None:
        """Deliver events for a moment; notice the end; apply a kill, the timeout or the stop grace."""
        for event in self._processes.read(POLL_SECONDS):
            self._deliver(event)
        if not self._ended and self._processes.exit_status is not None:
            self._deliver_rest()
            if self._processes.group_alive:
                self._processes.end()  # processes a worker started and left behind
            self._ended = True
        if self._ended:
            return
        if self._facts.first_raising_rank is not None:
            # One rank failed: the others may wait on it forever in a collective.
            self._terminate(None)
            return
        now = time.monotonic()
        if self._kill_requested:
            self._terminate("interrupt")
        elif self.options.timeout is not None and now - self._started_at > self.options.timeout:
            self._terminate("timeout")
        elif self.stopping and self._facts.stopping_step is None and now - (self._stop_requested_at or now) > self.options.stop_grace:
            # No step boundary in time (a loop without report(), a long
            # compilation): fall back to the hard stop.
            self._terminate("interrupt")

    def request_stop(self) -> bool:
        """Graceful stop (any thread); False if one was already requested."""
        if self.stopping:
            return False
        self._stop_requested_at = time.monotonic()
        if self._stop_request is not None:
            self._stop_request.request()
        return True

    def request_kill(self) -> None:
        """Hard stop (any thread): the following thread ends every process at its next poll."""
        self._kill_requested = True

    def kill_now(self) -> None:
        """Hard stop from the following thread itself (a second interrupt)."""
        self._terminate("interrupt")

    def finish(self) -> Ending:
        """How the run ended, once `ended`; the display shows it too."""
        assert self._ended, "finish() is for a run that has ended"
        ending = ending_of(self._outcome())
        if self._display is not None:
            self._display.finish(ending.status, ending.text)
        return ending

    def close(self) -> None:
        """Leave nothing running (after an unexpected error too) and free the kernel for the next run."""
        if not self._ended and self._processes.pid:
            self._terminate("interrupt")
        self._processes.close()
        if Run._alive is self:
            Run._alive = None

    def _outcome(self) -> Outcome:
        seconds = time.monotonic() - self._started_at
        if self._stop_reason is not None:
            return Stopped(self._stop_reason, seconds, self._facts.last_step)
        facts = self._facts
        ranks = list(range(facts.world_size or 1)) if self.options.all_results else [0]
        # None only if the supervisor could not be reaped even after SIGKILL
        # (stuck in uninterruptible I/O on a device): say it was killed.
        exit_status = self._processes.exit_status
        exit_status = -signal.SIGKILL if exit_status is None else exit_status
        assert self._processes.places is not None
        outcome = collect(
            self._processes.places.run_dir, facts.ranks_by_pid, facts.first_raising_rank, exit_status, ranks, seconds, facts.stopping_step
        )
        if isinstance(outcome, Died):
            self._processes.keep = outcome.kept
        return outcome

    def _terminate(self, reason: Literal["interrupt", "timeout"] | None) -> None:
        """End every process now, even if the user keeps pressing interrupt. `reason` None: a worker failed."""
        if self._stop_reason is None and reason is not None:
            self._stop_reason = reason
        while True:
            try:
                self._processes.end()
                break
            except KeyboardInterrupt:
                continue
        self._deliver_rest()
        self._ended = True

    def _deliver(self, event: Event) -> None:
        for observer in self._observers:
            observer.on_event(event)

    def _deliver_rest(self) -> None:
        for event in self._processes.read_rest():
            self._deliver(event)


class FollowedRun(Protocol):
    """A run the notebook follows, in the foreground or in a helper thread: one on this machine (`Run`) or on a pod slice.

    Only `request_stop` and `request_kill` may be called from another thread than the one that follows it.
    """

    @property
    def ended(self) -> bool: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def stopping_note(self) -> str: ...

    def start(self) -> None: ...

    def poll(self) -> None: ...

    def request_stop(self) -> bool: ...

    def request_kill(self) -> None: ...

    def kill_now(self) -> None: ...

    def finish(self) -> Ending: ...

    def close(self) -> None: ...


def run_in_foreground(run: FollowedRun) -> Ending:
    """Run in this thread. The first interrupt stops gracefully, a second one at once."""
    try:
        run.start()
        while not run.ended:
            try:
                run.poll()
            except KeyboardInterrupt:
                if run.request_stop():
                    print(f"tpu_nb: {run.stopping_note}", file=sys.stderr)
                else:
                    run.kill_now()
        return run.finish()
    finally:
        run.close()
