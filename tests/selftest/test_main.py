"""`python -m tpu_nb.selftest --quick`: its table, its exit code and its JSON, in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_quick_runs_the_first_checks_and_writes_the_report(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tpu_nb.selftest", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PJRT_DEVICE": "CPU"},
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = tmp_path.glob("tpu_nb-selftest-*.json")
    report = json.loads(path.read_text())
    assert [result["name"] for result in report["results"]] == ["detection", "every_core", "collectives"]
    assert all(result["status"] == "passed" for result in report["results"])
    assert report["runtime"]["pjrt_device"] == "CPU" and report["runtime"]["versions"]["torch_xla"]
    assert "3 passed, 0 failed, 0 skipped" in done.stdout and str(path) in done.stdout
