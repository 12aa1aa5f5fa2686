"""Following one run from the kernel: events, timeout, graceful and hard stops, the display.

One run at a time per kernel: TPU devices cannot be shared between two sets
of workers. The thread that follows a run (the main thread for a foreground
cell, a helper thread for a background run) is the only one that touches
the processes; other threads only set flags.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tpu_nb.events import Event, Output
from tpu_nb.launcher import outcome as outcomes
from tpu_nb.launcher.options import LaunchOptions
from tpu_nb.launcher.preflight import check_can_launch
from tpu_nb.launcher.program import Program
from tpu_nb.launcher.run import Run, RunObserver
from tpu_nb.progress.display import make_display, widgets_supported
from tpu_nb.progress.state import FinalStatus
from tpu_nb.runtime import detect

POLL_SECONDS = 0.1

Write = Callable[[str, str], None]  # (stream name, text)


def write_to_sys(stream: str, text: str) -> None:
    target = sys.stderr if stream == "stderr" else sys.stdout
    target.write(text)
    target.flush()


class OutputPrinter:
    """Shows what workers print: rank 0's as is, other ranks' prefixed (on request)."""

    def __init__(self, all_ranks: bool, write: Write = write_to_sys) -> None:
        self.all_ranks = all_ranks
        self.write = write
        self._line_start: dict[tuple[int | None, str], bool] = {}

    def on_event(self, event: Event) -> None:
        if not isinstance(event, Output):
            return
        if event.rank == 0 or event.rank is None:
            self.write(event.stream, event.text)
        elif self.all_ranks:
            self.write(event.stream, self._prefixed(event))

    def _prefixed(self, event: Output) -> str:
        key = (event.rank, event.stream)
        prefix = f"[rank {event.rank}] "
        out = []
        at_start = self._line_start.get(key, True)
        for piece in event.text.splitlines(keepends=True):
            out.append(prefix + piece if at_start else piece)
            at_start = piece.endswith(("\n", "\r"))
        self._line_start[key] = at_start
        return "".join(out)


_active: RunController | None = None


def active() -> RunController | None:
    """The run alive in this kernel, if any."""
    return _active


class RunController:
    """Starts a run after the checks, and follows it until it ends."""

    def __init__(
        self, program: Program, options: LaunchOptions, observers: list[RunObserver], title: str, write: Write = write_to_sys
    ) -> None:
        info = detect()
        running = _active
        environment = check_can_launch(info, options, running=None if running is None else running.title)
        for note in environment.notes:
            write("stderr", note + "\n")
        self.title = title
        self.options = options
        self.display = make_display(title, info.label, environment.devices, widgets_supported()) if options.progress else None
        displays = [] if self.display is None else [self.display]
        self.run = Run(program, environment, [OutputPrinter(options.all_ranks_output, write), *observers, *displays], options.all_results)
        self.stop_requested_at: float | None = None
        self.kill_requested = False
        self._deadline: float | None = None

    def start(self) -> None:
        global _active
        _active = self
        try:
            self.run.start()
        except BaseException:
            _active = None
            raise
        self._deadline = None if self.options.timeout is None else time.monotonic() + self.options.timeout

    @property
    def running(self) -> bool:
        return not self.run.finished

    def poll(self) -> None:
        """Deliver events for a moment; apply a kill, the timeout or the stop grace."""
        self.run.pump(POLL_SECONDS)
        if not self.running:
            return
        now = time.monotonic()
        if self.kill_requested:
            self.terminate("interrupt")
        elif self._deadline is not None and now > self._deadline:
            self.terminate("timeout")
        elif (
            self.stop_requested_at is not None
            and self.run.stopping_step is None
            and now - self.stop_requested_at > self.options.stop_grace
        ):
            # No step boundary in time (a loop without report(), a long
            # compilation): fall back to the hard stop.
            self.terminate("interrupt")

    def request_stop(self) -> bool:
        """Graceful stop (any thread); False if one was already requested."""
        if self.stop_requested_at is not None:
            return False
        self.stop_requested_at = time.monotonic()
        self.run.request_stop()
        return True

    def terminate(self, reason: str) -> None:
        """Hard stop now (owner thread only), even if the user keeps pressing interrupt."""
        while True:
            try:
                self.run.terminate(reason)
                return
            except KeyboardInterrupt:
                continue

    def finish(self) -> outcomes.Outcome:
        """The outcome, once not `running`; the display shows it too."""
        outcome = self.run.outcome()
        if self.display is not None:
            self.display.finish(*final_status(outcome))
        return outcome

    def close(self) -> None:
        """Leave nothing running (after an unexpected error too) and free the kernel for the next run."""
        global _active
        if self.running:
            self.terminate("interrupt")
        if _active is self:
            _active = None


def final_status(outcome: outcomes.Outcome) -> tuple[FinalStatus, str | None]:
    """What the progress display says at the end of a run."""
    if isinstance(outcome, outcomes.Succeeded):
        if outcome.stopped_at_step is not None:
            return "stopped", f"stopped by user at step {outcome.stopped_at_step}"
        return "done", None
    if isinstance(outcome, outcomes.Failed):
        failure = outcome.failure
        return "failed", f"rank {failure.rank} raised {failure.type_name}: {failure.message}"
    if isinstance(outcome, outcomes.Died):
        return "failed", outcome.detail
    at_step = "" if outcome.step is None else f" at step {outcome.step}"
    if outcome.reason == "timeout":
        return "timeout", f"timed out after {outcome.seconds:.0f}s{at_step}"
    return "interrupted", f"interrupted by the user{at_step}"


def run_in_foreground(program: Program, options: LaunchOptions, observers: list[RunObserver], title: str) -> outcomes.Outcome:
    """Run in this thread. The first interrupt stops gracefully, a second one at once."""
    controller = RunController(program, options, observers, title)
    controller.start()
    try:
        while controller.running:
            try:
                controller.poll()
            except KeyboardInterrupt:
                if controller.request_stop():
                    print(
                        "tpu_nb: stopping after the next step every worker reaches "
                        f"(within {controller.options.stop_grace:g}s; interrupt again to stop at once).",
                        file=sys.stderr,
                    )
                else:
                    controller.terminate("interrupt")
        return controller.finish()
    finally:
        controller.close()
