"""Running a program on every XLA device and turning the outcome into a result."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any, Callable

from tpu_nb.events import Event, Output
from tpu_nb.launcher import outcome as outcomes
from tpu_nb.launcher.errors import TrainingInterrupted, TrainingTimedOut, WorkerDied, WorkerError
from tpu_nb.launcher.options import LaunchOptions
from tpu_nb.launcher.preflight import check_can_launch
from tpu_nb.launcher.program import FunctionProgram, Program
from tpu_nb.launcher.run import Run, RunObserver
from tpu_nb.progress.display import make_display, widgets_supported
from tpu_nb.progress.state import FinalStatus
from tpu_nb.runtime import detect

_POLL_SECONDS = 0.1
_active: str | None = None  # what is running now, as the user launched it


class OutputPrinter:
    """Shows what workers print: rank 0's as is, other ranks' prefixed (on request)."""

    def __init__(self, all_ranks: bool) -> None:
        self.all_ranks = all_ranks
        self._line_start: dict[tuple[int | None, str], bool] = {}

    def on_event(self, event: Event) -> None:
        if not isinstance(event, Output):
            return
        stream = sys.stderr if event.stream == "stderr" else sys.stdout
        if event.rank == 0 or (event.rank is None):
            stream.write(event.text)
        elif self.all_ranks:
            stream.write(self._prefixed(event))
        stream.flush()

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


def run_in_foreground(program: Program, options: LaunchOptions, observers: list[RunObserver], label: str) -> outcomes.Outcome:
    """Start the workers, follow them until they end, and stop them on interrupt or timeout."""
    global _active
    info = detect()
    environment = check_can_launch(info, options, running=_active)
    for note in environment.notes:
        print(note, file=sys.stderr)
    display = make_display(label, info.label, environment.devices, widgets_supported()) if options.progress else None
    displays = [] if display is None else [display]
    run = Run(program, environment, [OutputPrinter(options.all_ranks_output), *observers, *displays], options.all_results)
    _active = label
    try:
        run.start()
        deadline = None if options.timeout is None else time.monotonic() + options.timeout
        while not run.finished:
            try:
                run.pump(_POLL_SECONDS)
                if deadline is not None and time.monotonic() > deadline:
                    _terminate(run, "timeout")
            except KeyboardInterrupt:
                _terminate(run, "interrupt")
        outcome = run.outcome()
        if display is not None:
            display.finish(*final_status(outcome))
        return outcome
    finally:
        if not run.finished:  # an observer raised: leave nothing running
            _terminate(run, "interrupt")
        _active = None


def _terminate(run: Run, reason: str) -> None:
    """Stop every worker, even if the user keeps pressing interrupt meanwhile."""
    while True:
        try:
            run.terminate(reason)
            return
        except KeyboardInterrupt:
            continue


def final_status(outcome: outcomes.Outcome) -> tuple[FinalStatus, str | None]:
    """What the progress display says at the end of a run."""
    if isinstance(outcome, outcomes.Succeeded):
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


def result_of(outcome: outcomes.Outcome) -> dict[int, dict[str, Any]]:
    """The parts each rank sent back, or the exception that says why there are none."""
    if isinstance(outcome, outcomes.Succeeded):
        return outcome.parts
    if isinstance(outcome, outcomes.Failed):
        failure = outcome.failure
        raise WorkerError(failure.rank, failure.world_size, failure.type_name, failure.message, failure.traceback_lines)
    if isinstance(outcome, outcomes.Died):
        hint = (
            " The host most likely ran out of memory: use a smaller per-core batch or model, or fewer cores."
            if outcome.exit_code == -signal.SIGKILL
            else ""
        )
        raise WorkerDied(f"{outcome.detail} after {outcome.seconds:.1f}s, without a Python exception.{hint}")
    if isinstance(outcome, outcomes.Stopped):
        at_step = f" at step {outcome.step}" if outcome.step is not None else ""
        if outcome.reason == "timeout":
            raise TrainingTimedOut(f"timed out after {outcome.seconds:.1f}s{at_step}: every worker was stopped.")
        raise TrainingInterrupted(f"interrupted after {outcome.seconds:.1f}s{at_step}: every worker was stopped.")
    raise TypeError(f"unknown outcome {outcome!r}; this is a tpu_nb bug")


def launch(
    fn: Callable[..., Any],
    *args: Any,
    cores: int | None = None,
    timeout: float | None = None,
    all_ranks_output: bool = False,
    progress: bool = True,
    all_results: bool = False,
) -> Any:
    """Run `fn(*args)` in a worker per XLA device (forked: no pickling) and return rank 0's result.

    With `all_results=True`, return every rank's result as a list by rank.
    Raises `WorkerError` with the worker's traceback if `fn` raised,
    `WorkerDied`, `TrainingInterrupted` or `TrainingTimedOut`.
    """
    options = LaunchOptions(cores, timeout, all_ranks_output, progress, all_results)
    observers: list[RunObserver] = []
    outcome = run_in_foreground(FunctionProgram(fn, args), options, observers, label=f"tpu_nb.launch({getattr(fn, '__name__', fn)!s})")
    parts = result_of(outcome)
    if all_results:
        return [parts[rank]["value"] for rank in sorted(parts)]
    return parts[0]["value"]
