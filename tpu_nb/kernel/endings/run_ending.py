"""How a run ended: read from its exchange directory, then said once, in words and as the notebook's exception.

This is where a worker's exception becomes the notebook's error: `ending_of`
turns every outcome into an `Ending` (status, text, exception, results),
which `%%tpu_train`, `tpu_nb.launch`, background handles and the dashboard
all show as it is.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from tpu_nb.kernel.endings.autograd_fork import explain_autograd_fork
from tpu_nb.kernel.endings.notebook_errors import TrainingInterrupted, TrainingTimedOut, WorkerDied, WorkerError, where_raised
from tpu_nb.kernel.endings.out_of_memory import explain_out_of_memory, explain_torch_tpu_error
from tpu_nb.kernel.endings.status import RunStatus
from tpu_nb.wire.results import RankResult, ResultNotLoaded, load_result
from tpu_nb.wire.stop_reason import StopReason
from tpu_nb.wire.supervisor_report import SupervisorReport, load_report
from tpu_nb.wire.worker_exceptions import ExceptionReport, load_exceptions

_OUT_OF_MEMORY_HINT = " The host most likely ran out of memory: use a smaller per-core batch or model, or fewer cores."


@dataclass(frozen=True, slots=True)
class Succeeded:
    results: Mapping[int, RankResult]  # by rank
    seconds: float
    stopped_at_step: int | None = None  # set when it was stopped gracefully
    stopped_by: StopReason = StopReason.USER  # the reason the workers obeyed then


@dataclass(frozen=True, slots=True)
class Raised:
    report: ExceptionReport
    seconds: float
    host: int | None = None  # on a pod


@dataclass(frozen=True, slots=True)
class Died:
    rank: int | None
    exit_code: int | None  # negative: killed by that signal
    who: str  # "the worker for rank 1", "the tpu_nb supervisor process", ...
    seconds: float
    cause: str | None = None  # when no exit code says it: "xmp.spawn failed: ...", "ended without ..."
    kept: Path | None = None  # a result file that could not be loaded, kept on disk for the user


@dataclass(frozen=True, slots=True)
class Stopped:
    """Ended by the kernel."""

    reason: Literal["interrupt", "timeout"]
    seconds: float
    step: int | None


Outcome = Succeeded | Raised | Died | Stopped


@dataclass(frozen=True, slots=True)
class Ending:
    """A run's end as everyone shows it."""

    status: RunStatus
    text: str | None
    """What happened, for the dashboard and handles (None for a normal end)."""
    error: BaseException | None
    """What the notebook raises (None when the results came back)."""
    results: Mapping[int, RankResult] = field(default_factory=lambda: MappingProxyType({}))
    """Each rank's result by rank (rank 0's, or every rank's with all_results), when the results came back."""


def ending_of(outcome: Outcome) -> Ending:
    """The one place an outcome becomes words and an exception."""
    if isinstance(outcome, Succeeded):
        if outcome.stopped_at_step is not None:
            status: RunStatus = "pruned" if outcome.stopped_by is StopReason.PRUNED else "stopped"
            return Ending(status, f"stopped by {outcome.stopped_by.who} at step {outcome.stopped_at_step}", None, outcome.results)
        return Ending("done", None, None, outcome.results)
    if isinstance(outcome, Raised):
        report = outcome.report
        advice = explain_torch_tpu_error(report.message) or explain_out_of_memory(report.message) or explain_autograd_fork(report.message)
        error = WorkerError(report.rank, report.world_size, report.type_name, report.message, report.traceback_lines, advice, outcome.host)
        who = f"rank {report.rank}" if outcome.host is None else where_raised(report.rank, report.world_size, outcome.host)
        text = f"{who} raised {report.type_name}: {report.message}"
        return Ending("failed", text if advice is None else f"{text}\n{advice}", error)
    if isinstance(outcome, Died):
        if outcome.cause is not None:
            how, hint = outcome.cause, ""
        else:
            how, hint = describe_exit(outcome.exit_code)
        text = f"{outcome.who} {how} after {outcome.seconds:.1f}s, without a Python exception.{hint}"
        return Ending("failed", text, WorkerDied(text))
    if isinstance(outcome, Stopped):
        at_step = "" if outcome.step is None else f" at step {outcome.step}"
        if outcome.reason == "timeout":
            text = f"timed out after {outcome.seconds:.1f}s{at_step}"
            return Ending("timeout", text, TrainingTimedOut(f"{text}: every worker was stopped."))
        text = f"interrupted after {outcome.seconds:.1f}s{at_step}"
        return Ending("interrupted", text, TrainingInterrupted(f"{text}: every worker was stopped."))
    raise TypeError(f"unknown outcome {outcome!r}; this is a tpu_nb bug")


def describe_exit(code: int | None) -> tuple[str, str]:
    """How a process ended, from a waitpid-style code: ("was killed by SIGKILL", and what that usually means)."""
    if code is None:
        return "ended", ""
    if code >= 0:
        return f"exited with code {code}", ""
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by {name}", _OUT_OF_MEMORY_HINT if code == -signal.SIGKILL else ""


def collect(
    exchange_dir: Path,
    ranks_by_pid: Mapping[int, int],
    first_raising_rank: int | None,
    supervisor_status: int,
    wanted_ranks: list[int],
    seconds: float,
    stopped_at_step: int | None = None,
    stopped_by: StopReason = StopReason.USER,
    returned: Callable[[], Collection[str]] | None = None,
) -> Outcome:
    """Read what the supervisor and workers left in the exchange directory; `returned`, asked once the results are there to load,
    says which `--return` names to load (None: all)."""
    raised = load_exceptions(exchange_dir)
    if raised:
        rank = first_raising_rank if first_raising_rank in raised else min(raised)
        return Raised(raised[rank], seconds)
    report = load_report(exchange_dir)
    if report is None or report.error is not None or supervisor_status != 0:
        return _died(report, ranks_by_pid, supervisor_status, seconds)
    results = {}
    names = None if returned is None else returned()
    for rank in wanted_ranks:
        try:
            result = load_result(exchange_dir, rank, names=names)
        except ResultNotLoaded as error:
            return Died(rank, None, f"rank {rank}", seconds, f"finished, but {error}", kept=error.path)
        if result is None:
            return Died(rank, None, f"rank {rank}", seconds, "ended without sending back its result")
        results[rank] = result
    return Succeeded(MappingProxyType(results), seconds, stopped_at_step, stopped_by)


def _died(report: SupervisorReport | None, ranks_by_pid: Mapping[int, int], supervisor_status: int, seconds: float) -> Died:
    if report is None:
        return Died(None, supervisor_status, "the tpu_nb supervisor process", seconds)
    # The worker that did not exit cleanly is the cause; the executor
    # terminates the rest afterwards (SIGTERM).
    culprits = [(pid, code) for pid, code in report.exit_codes.items() if code != 0]
    primary = next(((pid, code) for pid, code in culprits if code != -signal.SIGTERM), culprits[0] if culprits else None)
    if primary is None:
        return Died(None, None, "xmp.spawn", seconds, f"failed ({report.error})")
    pid, code = primary
    rank = ranks_by_pid.get(pid)
    who = f"the worker for rank {rank}" if rank is not None else f"a worker (pid {pid})"
    return Died(rank, code, who, seconds)
