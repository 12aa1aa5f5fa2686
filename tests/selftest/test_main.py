"""`python -m tpu_nb.selftest --quick`: its table, its exit code and its JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.read_only import refuse_writes_in

from tpu_nb.selftest.__main__ import main


def test_quick_runs_the_first_checks_and_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # main() as `python -m` calls it, in this process: a process of its own would add only its imports (10 s here).
    code = main(["--quick", "--out", str(tmp_path)])
    done = capsys.readouterr()

    assert code == 0, done.out + done.err
    (path,) = tmp_path.glob("tpu_nb-selftest-*.json")
    report = json.loads(path.read_text())
    assert [result["name"] for result in report["results"]] == ["detection", "every_core", "collectives"]
    assert all(result["status"] == "passed" for result in report["results"])
    assert report["runtime"]["pjrt_device"] == "CPU" and report["runtime"]["versions"]["torch_xla"]
    assert "3 passed, 0 failed, 0 skipped" in done.out and str(path) in done.out


def test_an_out_directory_it_cannot_write_to_is_refused_before_any_check_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_writes_in(tmp_path, monkeypatch)
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit:
        main(["--quick", "--out", str(tmp_path)])
    done = capsys.readouterr()
    assert exit.value.code == 2 and time.monotonic() - started < 5  # not after the series: its report would be lost
    assert f"--out {tmp_path}: cannot write the report there (Read-only file system): give a directory you can write to." in done.err
    assert "detection" not in done.out  # no check ran
