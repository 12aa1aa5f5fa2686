"""A Run: built without side effects, refused while another is alive, and its end said once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.processes import descendants

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.history.log import LOG_FILE, read_log
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.run.followed_run import run_in_foreground
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.workers.processes.programs import FunctionProgram


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


def test_a_failure_after_the_processes_started_leaves_none_running(monkeypatch: pytest.MonkeyPatch) -> None:
    def unwatchable(*args: object, **kwargs: object) -> None:
        raise OSError(24, "Too many open files")  # what the stall watch's files can meet

    monkeypatch.setattr("tpu_nb.kernel.run.local_run.StallWatch", unwatchable)
    run = Run(FunctionProgram(__import__("time").sleep, (30,)), LaunchOptions(progress=False), "a run")
    with pytest.raises(OSError, match="Too many open files"):
        run.start()
    run.close()
    assert not descendants(__import__("os").getpid())  # the supervisor and its worker were ended
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
    [record] = read_log(tmp_path / "log").records
    assert (record.number, record.title, record.status, record.trial) == (1, "a logged run", "done", {"lr": 0.1})
    assert record.final == {"loss": 1.0} and record.options == {"progress": False, "cores": 1, "run_log": str(tmp_path / "log")}
    run_in_foreground(Run(FunctionProgram(reports_twice, ()), LaunchOptions(progress=False, run_log="off"), "not logged"))
    assert len(read_log(tmp_path / "log").records) == 1
    blocked = tmp_path / "a file"
    blocked.write_text("not a directory")
    ending = run_in_foreground(Run(FunctionProgram(trains_a_step, ()), LaunchOptions(progress=False, run_log=str(blocked)), "blocked"))
    assert ending.status == "done"  # a log that cannot be written never fails the run: its weights come back
    assert all(torch.equal(tensor, one_step()[name]) for name, tensor in ending.results[0].value.items())
    assert f"tpu_nb: the run log {blocked / LOG_FILE} could not be written" in capsys.readouterr().err


def one_step() -> dict[str, torch.Tensor]:
    """A layer's weights after one step of gradient descent, the same in every process (seeded).

    The gradient is written out, not taken by backward(): autograd run in pytest's own process breaks the forked
    workers' autograd for every later test (as in a notebook).
    """
    torch.manual_seed(0)
    layer = torch.nn.Linear(2, 1)
    inputs = torch.ones(1, 2)
    with torch.no_grad():
        error = layer(inputs) - 1.0  # the gradient of half the squared error is error * inputs
        layer.weight -= 0.1 * error.T @ inputs
        layer.bias -= 0.1 * error.sum(0)
    return layer.state_dict()


def trains_a_step() -> dict[str, torch.Tensor]:
    import tpu_nb

    tpu_nb.report(step=0, loss=1.0)
    return one_step()


def test_a_damaged_run_log_never_costs_a_run_its_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / LOG_FILE).write_bytes(
        b'{"number": 4, "title": "by hand", "started": 1700000000.0, "seconds": 1.0, "status": "done"}\n'
        + b"\xff\xfe a non-UTF-8 line\n"
        + b'{"number": 1e999}\n'
        + b'{"number": 5, "title": "cut sh'  # the disk filled: no newline
    )
    options = LaunchOptions(progress=False, run_log=str(tmp_path), cores=1)
    trial = {"pair": {(0, 1): 2.0}}  # JSON has no tuple keys
    ending = run_in_foreground(Run(FunctionProgram(trains_a_step, ()), options, "trained", logged={"trial": trial}))
    assert (ending.status, ending.error) == ("done", None)
    assert all(torch.equal(tensor, one_step()[name]) for name, tensor in ending.results[0].value.items())
    assert "run log" not in capsys.readouterr().err
    log = read_log(tmp_path)
    assert [(record.number, record.title) for record in log.records] == [(4, "by hand"), (5, "trained")]
    assert log.records[1].trial == {"pair": {"(0, 1)": 2.0}} and log.lines_passed_over == 3
