"""Running a program on every XLA device and turning the outcome into a result."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from tpu_nb.launcher import outcome as outcomes
from tpu_nb.launcher.background import MetricsLog, TrainingRun
from tpu_nb.launcher.controller import RunController, run_in_foreground
from tpu_nb.launcher.errors import TrainingInterrupted, TrainingTimedOut, WorkerDied, WorkerError
from tpu_nb.launcher.options import LaunchOptions
from tpu_nb.launcher.program import FunctionProgram


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
    stop_grace: float = 5.0,
    background: bool = False,
) -> Any:
    """Run `fn(*args)` in a worker per XLA device (forked: no pickling) and return rank 0's result.

    With `all_results=True`, return every rank's result as a list by rank.
    With `background=True`, return at once a `TrainingRun` handle (`status`,
    `wait()`, `stop()`, `kill()`, `metrics`, `result`).
    An interrupt stops gracefully: `report(...)` raises `StopTraining` in
    `fn` at the next step every rank reaches (within `stop_grace` seconds,
    else every worker is terminated); a second interrupt stops at once.
    Raises `WorkerError` with the worker's traceback if `fn` raised,
    `WorkerDied`, `TrainingInterrupted` or `TrainingTimedOut`.
    """
    options = LaunchOptions(cores, timeout, all_ranks_output, progress, all_results, stop_grace)
    title = f"tpu_nb.launch({getattr(fn, '__name__', fn)!s})"

    def value_of(outcome: outcomes.Outcome) -> Any:
        parts = result_of(outcome)
        if all_results:
            return [parts[rank]["value"] for rank in sorted(parts)]
        return parts[0]["value"]

    if background:
        metrics = MetricsLog()
        controller = RunController(FunctionProgram(fn, args), options, [metrics], title)
        return TrainingRun(controller, metrics, str(getattr(fn, "__name__", "run")), value_of).start()
    return value_of(run_in_foreground(FunctionProgram(fn, args), options, [], title))
