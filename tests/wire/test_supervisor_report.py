"""The supervisor's report and the modules it imported, as the kernel reads them from the run directory."""

from __future__ import annotations

import signal
from pathlib import Path

from tpu_nb.wire.supervisor_report import SupervisorReport, load_imported_modules, load_report, save_imported_modules, save_report


def test_the_report_comes_back_and_a_supervisor_that_wrote_none_has_none(tmp_path: Path) -> None:
    assert load_report(tmp_path) is None
    report = SupervisorReport("BrokenProcessPool", {101: -signal.SIGKILL})
    save_report(report, tmp_path)
    assert load_report(tmp_path) == report


def test_the_imported_modules_come_back_sorted_and_none_before_they_were_saved(tmp_path: Path) -> None:
    assert load_imported_modules(tmp_path) == []
    save_imported_modules(["torch_xla", "numpy", "torch"], tmp_path)
    assert load_imported_modules(tmp_path) == ["numpy", "torch", "torch_xla"]
