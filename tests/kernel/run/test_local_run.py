"""A Run: built without side effects, refused while another is alive, and its end said once."""

from __future__ import annotations

import pytest
from support.processes import descendants

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
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
