"""A Run: built without side effects, refused while another is alive, and its end said once."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.processes import descendants

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.history.log import read_log
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.run.followed_run import run_in_foreground
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.workers.programs import FunctionProgram


def test_building_a_run_starts_nothing_and_shows_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    Run(FunctionProgram(print, ("never",)), LaunchOptions(), "a run")
    assert Run.alive() is None
    assert capsys.readouterr() == ("", "")
    assert not descendants(__import__("os").getpid())


def test_a_second_run_is_refused_while_one_is_alive() -> None:
    first = Run(FunctionProgram(__import__("time").sleep, (30,)), LaunchOptions(progress=False), "the first run")
    first.start()
    try:
        assert Run.alive() == "the first run"
        with pytest.raises(LaunchRefused, match="the first run is still running in this kernel"):
            Run(FunctionProgram(print, ()), LaunchOptions(progress=False), "a second run").start()
    finally:
        first.close()
    assert Run.alive() is None


def test_a_run_in_the_foreground_ends_with_its_results() -> None:
    ending = run_in_foreground(Run(FunctionProgram(sum, ([1, 2],)), LaunchOptions(progress=False), "sum"))
    assert (ending.status, ending.error) == ("done", None)
    assert ending.results[0].value == 3
    assert Run.alive() is None


def reports_twice() -> str:
    import tpu_nb

    tpu_nb.report(step=0, loss=2.0)
    tpu_nb.report(step=1, loss=1.0)
    return "trained"


def test_every_run_leaves_its_record_in_the_run_log_unless_it_is_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options = LaunchOptions(progress=False, run_log=str(tmp_path / "log"), cores=1)
    run_in_foreground(Run(FunctionProgram(reports_twice, ()), options, "a logged run", logged={"trial": {"lr": 0.1}}))
    [record] = read_log(tmp_path / "log")
    assert (record.number, record.title, record.status, record.trial) == (1, "a logged run", "done", {"lr": 0.1})
    assert record.final == {"loss": 1.0} and record.options == {"progress": False, "cores": 1, "run_log": str(tmp_path / "log")}
    run_in_foreground(Run(FunctionProgram(reports_twice, ()), LaunchOptions(progress=False, run_log="off"), "not logged"))
    assert len(read_log(tmp_path / "log")) == 1
    blocked = tmp_path / "a file"
    blocked.write_text("not a directory")
    ending = run_in_foreground(Run(FunctionProgram(reports_twice, ()), LaunchOptions(progress=False, run_log=str(blocked)), "blocked"))
    assert ending.status == "done"  # a log that cannot be written never fails the run
    assert f"the run log {blocked} could not be written" in capsys.readouterr().err
