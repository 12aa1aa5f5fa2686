"""How a run ended, said once: status, text and exception for every outcome, and what the run dir says."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tpu_nb.kernel.endings.notebook_errors import TrainingInterrupted, TrainingTimedOut, WorkerDied, WorkerError
from tpu_nb.kernel.endings.run_ending import Died, Raised, Stopped, Succeeded, collect, describe_exit, ending_of
from tpu_nb.wire.results import RankResult, ResultPlaces, save_result
from tpu_nb.wire.stop_reason import StopReason
from tpu_nb.wire.supervisor_report import SupervisorReport, save_report
from tpu_nb.wire.worker_exceptions import ExceptionReport, save_exception

RESULTS = {0: RankResult(42, has_value=True)}


def test_a_normal_end_is_done_with_its_results() -> None:
    ending = ending_of(Succeeded(RESULTS, 3.0))
    assert (ending.status, ending.text, ending.error) == ("done", None, None)
    assert ending.results[0].value == 42


def test_a_graceful_stop_keeps_the_results_and_says_the_step() -> None:
    ending = ending_of(Succeeded(RESULTS, 3.0, stopped_at_step=12))
    assert (ending.status, ending.text, ending.error) == ("stopped", "stopped by the user at step 12", None)
    assert ending.results == RESULTS


def test_a_stop_its_deadline_asked_for_says_the_deadline() -> None:
    ending = ending_of(Succeeded(RESULTS, 3.0, stopped_at_step=12, stopped_by=StopReason.DEADLINE))
    assert (ending.status, ending.text, ending.error) == ("stopped", "stopped by its deadline at step 12", None)


def test_a_stop_a_searchs_pruner_asked_for_is_pruned_with_its_results() -> None:
    ending = ending_of(Succeeded(RESULTS, 3.0, stopped_at_step=12, stopped_by=StopReason.PRUNED))
    assert (ending.status, ending.text, ending.error) == ("pruned", "stopped by its pruner at step 12", None)
    assert ending.results == RESULTS


def test_a_worker_exception_becomes_a_worker_error_with_its_traceback() -> None:
    report = ExceptionReport(1, 2, "KeyError", "'missing'", ["Traceback line", "KeyError: 'missing'"])
    ending = ending_of(Raised(report, 3.0))
    assert (ending.status, ending.text) == ("failed", "rank 1 raised KeyError: 'missing'")
    assert isinstance(ending.error, WorkerError)
    assert ending.error._render_traceback_() == [
        "Traceback line",
        "KeyError: 'missing'",
        "(raised in the worker for rank 1 of 2; every worker was stopped)",
    ]
    assert not ending.results


def test_a_kill_by_sigkill_says_out_of_memory_in_the_same_words_everywhere() -> None:
    ending = ending_of(Died(0, -signal.SIGKILL, "the worker for rank 0", 4.25))
    assert ending.status == "failed"
    assert ending.text == (
        "the worker for rank 0 was killed by SIGKILL after 4.2s, without a Python exception. "
        "The host most likely ran out of memory: use a smaller per-core batch or model, or fewer cores."
    )
    assert isinstance(ending.error, WorkerDied) and str(ending.error) == ending.text


def test_other_deaths_name_the_exit_without_a_memory_hint() -> None:
    assert describe_exit(-signal.SIGSEGV) == ("was killed by SIGSEGV", "")
    assert describe_exit(3) == ("exited with code 3", "")
    text = ending_of(Died(None, None, "xmp.spawn", 1.0, "failed (RuntimeError: boom)")).text
    assert text == "xmp.spawn failed (RuntimeError: boom) after 1.0s, without a Python exception."


@pytest.mark.parametrize(
    ("reason", "status", "error_type", "text"),
    [
        ("timeout", "timeout", TrainingTimedOut, "timed out after 30.0s at step 7"),
        ("interrupt", "interrupted", TrainingInterrupted, "interrupted after 30.0s at step 7"),
    ],
)
def test_a_hard_stop_is_said_the_same_by_the_dashboard_and_the_exception(
    reason: str, status: str, error_type: type[BaseException], text: str
) -> None:
    ending = ending_of(Stopped(reason, 30.0, 7))  # type: ignore[arg-type]
    assert (ending.status, ending.text) == (status, text)
    assert isinstance(ending.error, error_type)
    assert str(ending.error) == f"{text}: every worker was stopped."


def test_collect_prefers_the_first_rank_that_failed(tmp_path: Path) -> None:
    for rank in (0, 1):
        save_exception(ExceptionReport(rank, 2, "ValueError", f"rank {rank}", []), tmp_path)
    outcome = collect(tmp_path, {}, first_raising_rank=1, supervisor_status=1, wanted_ranks=[0], seconds=1.0)
    assert isinstance(outcome, Raised) and outcome.report.rank == 1


def test_collect_reads_the_results_after_a_clean_exit(tmp_path: Path) -> None:
    save_report(SupervisorReport(None, {}), tmp_path)
    save_result(RankResult(7, True, {"x": [1, 2]}, ("y",)), ResultPlaces(tmp_path), 0)
    outcome = collect(tmp_path, {}, None, 0, [0], 2.0, stopped_at_step=None)
    assert outcome == Succeeded({0: RankResult(7, True, {"x": [1, 2]}, ("y",))}, 2.0)


def test_collect_names_the_worker_a_signal_killed_not_the_ones_terminated_after_it(tmp_path: Path) -> None:
    save_report(SupervisorReport("BrokenProcessPool", {101: -signal.SIGTERM, 102: -signal.SIGKILL}), tmp_path)
    outcome = collect(tmp_path, {101: 0, 102: 1}, None, 1, [0], 5.0)
    assert outcome == Died(1, -signal.SIGKILL, "the worker for rank 1", 5.0)


def test_collect_without_a_report_blames_the_supervisor(tmp_path: Path) -> None:
    outcome = collect(tmp_path, {}, None, -signal.SIGKILL, [0], 1.0)
    assert outcome == Died(None, -signal.SIGKILL, "the tpu_nb supervisor process", 1.0)
