"""The report a user attaches to a bug report: every result, the runtime, the log, in a file named by its time."""

from __future__ import annotations

import json
from pathlib import Path

from tpu_nb.selftest.report import CheckResult, SelftestReport

RESULTS = (
    CheckResult(1, "detection", "detection agrees", "passed", {"devices_detected": 1}, 1.5, None, None),
    CheckResult(5, "compile_cache", "a second run hits the cache", "skipped", {}, 0.0, "XLA:CPU cannot load cached programs", None),
    CheckResult(9, "checkpoints", "save, verify, resume", "failed", {"saved": 0}, 3.0, "none was saved: fix", "Traceback ..."),
)


def test_the_report_is_written_as_json_named_by_its_time(tmp_path: Path) -> None:
    report = SelftestReport(0.0, {"label": "CPU"}, RESULTS, ("a line",))
    path = report.write(tmp_path / "reports")
    assert path.name.startswith("tpu_nb-selftest-") and path.suffix == ".json"
    written = json.loads(path.read_text())
    assert written["summary"] == {"passed": 1, "failed": 1, "skipped": 1}
    assert written["runtime"] == {"label": "CPU"} and written["log"] == ["a line"]
    assert [result["status"] for result in written["results"]] == ["passed", "skipped", "failed"]
    assert written["results"][2]["traceback"] == "Traceback ..." and written["seconds"] == 4.5
    assert report.failed == (RESULTS[2],)
