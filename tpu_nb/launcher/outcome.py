"""How a run ended, as typed results the kernel-side code turns into output."""

from __future__ import annotations

import pickle
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from tpu_nb.launcher.supervisor import SupervisorReport, read_report
from tpu_nb.launcher.transfer import load_parts
from tpu_nb.launcher.worker import WorkerFailure


@dataclass(frozen=True, slots=True)
class Succeeded:
    parts: dict[int, dict[str, Any]]  # rank -> the parts it sent back
    seconds: float
    stopped_at_step: int | None = None  # set when the user stopped it gracefully


@dataclass(frozen=True, slots=True)
class Failed:
    failure: WorkerFailure
    seconds: float


@dataclass(frozen=True, slots=True)
class Died:
    rank: int | None
    exit_code: int | None  # negative: killed by that signal
    detail: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Stopped:
    """Ended by the kernel: "interrupt" or "timeout"."""

    reason: str
    seconds: float
    step: int | None


Outcome = Union[Succeeded, Failed, Died, Stopped]


def collect(
    run_dir: Path,
    ranks_by_pid: dict[int, int],
    first_failed_rank: int | None,
    supervisor_status: int,
    wanted_ranks: list[int],
    seconds: float,
    stopped_at_step: int | None = None,
) -> Outcome:
    """Read what the supervisor and workers left in the run dir."""
    failures = {int(path.stem.split("-")[1]): path for path in run_dir.glob("error-*.pkl")}
    if failures:
        rank = first_failed_rank if first_failed_rank in failures else min(failures)
        return Failed(pickle.loads(failures[rank].read_bytes()), seconds)
    report = read_report(run_dir)
    if report is None or report.error is not None or supervisor_status != 0:
        return _died(report, ranks_by_pid, supervisor_status, seconds)
    parts = {}
    for rank in wanted_ranks:
        rank_parts = load_parts(run_dir, rank)
        if rank_parts is None:
            return Died(rank, None, f"rank {rank} ended without sending back its result", seconds)
        parts[rank] = rank_parts
    return Succeeded(parts, seconds, stopped_at_step)


def _died(report: SupervisorReport | None, ranks_by_pid: dict[int, int], supervisor_status: int, seconds: float) -> Died:
    if report is None:
        return Died(None, supervisor_status, f"the tpu_nb supervisor process {describe_status(supervisor_status)}", seconds)
    # The worker that did not exit cleanly is the cause; the executor
    # terminates the rest afterwards (SIGTERM).
    culprits = [(pid, code) for pid, code in report.exit_codes.items() if code != 0]
    primary = next(((pid, code) for pid, code in culprits if code != -signal.SIGTERM), culprits[0] if culprits else None)
    if primary is None:
        return Died(None, None, f"xmp.spawn failed: {report.error}", seconds)
    pid, code = primary
    rank = ranks_by_pid.get(pid)
    who = f"the worker for rank {rank}" if rank is not None else f"a worker (pid {pid})"
    return Died(rank, code, f"{who} {describe_status(code)}", seconds)


def describe_status(code: int) -> str:
    """'was killed by SIGKILL' / 'exited with code 3' (a waitpid-style code)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"
