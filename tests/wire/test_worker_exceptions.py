"""A worker's exception as the kernel gets it: capped to what a message can show, saved and read back by rank."""

from __future__ import annotations

import pickle
from pathlib import Path

from tpu_nb.wire.worker_exceptions import ExceptionReport, load_exceptions, save_exception


def test_an_exception_report_caps_what_it_keeps() -> None:
    report = ExceptionReport.of(3, 4, ValueError("m" * 100_000), [f"line {n}" for n in range(1000)])
    assert (report.rank, report.world_size, report.type_name) == (3, 4, "ValueError")
    assert len(report.message.encode()) <= 16 << 10 and "bytes skipped" in report.message
    assert report.traceback_lines[0] == "line 0" and report.traceback_lines[-1] == "line 999" and len(report.traceback_lines) == 201
    assert pickle.loads(pickle.dumps(report)) == report


def test_each_rank_s_exception_is_read_back_by_rank(tmp_path: Path) -> None:
    reports = [ExceptionReport.of(rank, 2, KeyError(f"rank {rank}"), ["Traceback", f"KeyError: 'rank {rank}'"]) for rank in (0, 1)]
    for report in reports:
        save_exception(report, tmp_path)
    assert load_exceptions(tmp_path) == {0: reports[0], 1: reports[1]}
    assert not list(tmp_path.glob("*.partial"))
