"""Sweeps on XLA:CPU, through `tpu_nb.launch(..., trials=...)`: a world of one device per trial, a queue, failures, stops, resumes."""

from __future__ import annotations

import errno
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.kernel import plain
from support.processes import descendants, interrupt_when, wait_until

import tpu_nb
from tpu_nb.kernel.endings.notebook_errors import LaunchRefused, WorkerError
from tpu_nb.kernel.trials.spec import Trial, parse_trials
from tpu_nb.kernel.trials.sweep import TrialOutcome, TrialWatch, Watches, _prefixed
from tpu_nb.kernel.trials.sweep_record import RECORD
from tpu_nb.kernel.trials.sweep_start import plan_sweep, run_sweep
from tpu_nb.kernel.trials.trial_record import record_values
from tpu_nb.workers.processes.programs import FunctionProgram

STARTUP = 60


@pytest.fixture(autouse=True)
def four_chips(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four XLA:CPU devices stand for a host's four chips: four worlds of one."""
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")


def timed_fold(trial: dict[str, Any]) -> dict[str, Any]:
    import torch_xla.runtime as xr

    started = time.time()
    time.sleep(1.5)
    return {
        **trial,
        "pid": os.getpid(),
        "devices": os.environ["CPU_NUM_DEVICES"],
        "world_size": xr.world_size(),
        "started": started,
        "ended": time.time(),
    }


def test_five_folds_on_four_chips_run_four_at_a_time_and_the_fifth_when_one_frees() -> None:
    result = tpu_nb.launch(timed_fold, trials="folds=5")
    values = result.values
    assert [(value["fold"], value["folds"]) for value in values] == [(fold, 5) for fold in range(5)]
    assert {(value["devices"], value["world_size"]) for value in values} == {("1", 1)}  # a world of one each
    assert len({value["pid"] for value in values}) == 5  # a process each, no collective between them
    moments = sorted([(value["started"], 1) for value in values] + [(value["ended"], -1) for value in values])
    running = [sum(change for _, change in moments[: index + 1]) for index in range(len(moments))]
    assert max(running) == 4
    fifth = max(values, key=lambda value: value["started"])
    assert fifth["started"] >= min(value["ended"] for value in values)  # queued until a chip freed
    assert [outcome.status for outcome in result.trials] == ["done"] * 5
    assert {outcome.where for outcome in result.trials} == {"cpu 0", "cpu 1", "cpu 2", "cpu 3"}
    assert not descendants(os.getpid())


def train_linear(trial: dict[str, Any]) -> Any:
    """A small deterministic training run: its weights depend on the trial's learning rate only."""
    import torch
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 2).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=trial["lr"])
    for step in range(6):
        generator = torch.Generator().manual_seed(step)
        loss = layer(torch.randn(4, 8, generator=generator).to(device)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        tpu_nb.report(step=step, loss=loss, tokens=4)
    return torch.cat([parameter.detach().cpu().flatten() for parameter in layer.parameters()])


def test_each_trials_weights_are_its_own_and_equal_to_the_same_trial_run_alone() -> None:
    import torch

    result = tpu_nb.launch(train_linear, trials=[{"lr": 0.05}, {"lr": 0.3}])
    first, second = result.values
    assert not torch.equal(first, second)
    alone = tpu_nb.launch(train_linear, {"lr": 0.3}, cores=1)  # a world of one, as the trial had
    assert torch.equal(second, alone)
    assert result.comparison.metric.name == "loss" and result.best is not None
    assert [row.trial.number for row in result.comparison.rows] == sorted((0, 1), key=lambda n: result.trials[n].final["loss"])
    # Each trial's speed, as its run measured it, goes into the comparison (no MFU on XLA:CPU).
    assert all(row.tokens_per_second and row.mfu is None for row in result.comparison.rows)
    assert result.comparison.text().count(" tokens/s") == 2


def maybe_fail(trial: dict[str, Any]) -> int:
    time.sleep(0.5)
    if trial["fail"]:
        raise ValueError("planted in trial two")
    return trial["n"]


def test_a_failing_trial_ends_alone_with_its_traceback_and_the_others_finish(capsys: pytest.CaptureFixture[str]) -> None:
    result = tpu_nb.launch(maybe_fail, trials=[{"n": 1, "fail": False}, {"n": 2, "fail": True}, {"n": 3, "fail": False}])
    assert [outcome.status for outcome in result.trials] == ["done", "failed", "done"]
    assert result.values == [1, None, 3]
    [failed] = result.failed
    assert isinstance(failed.error, WorkerError) and "planted in trial two" in str(failed.error)
    err = plain(capsys.readouterr().err)  # IPython may colour the traceback
    assert "trial #1 (n=2 fail=True) failed" in err and "raise ValueError" in err


def loop_until_stopped(folder: str, trial: dict[str, Any]) -> int:
    step = 0
    while True:
        step += 1
        time.sleep(0.05)
        tpu_nb.report(step=step, loss=1.0 / step)
        if step == 5:
            Path(folder, f"running-{trial['n']}").touch()


def test_an_interrupt_stops_every_running_trial_at_a_step_and_starts_no_queued_one(tmp_path: Path) -> None:
    interrupt_when(lambda: len(list(tmp_path.glob("running-*"))) == 4, (0.0,))
    started = time.monotonic()
    result = tpu_nb.launch(loop_until_stopped, str(tmp_path), trials=[{"n": n} for n in range(6)])
    assert time.monotonic() - started < STARTUP
    assert [outcome.status for outcome in result.trials] == ["stopped"] * 4 + ["not started"] * 2
    assert all(outcome.final["loss"] < 0.2 for outcome in result.trials[:4])
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"running-{n}" for n in range(4)]
    assert wait_until(lambda: not descendants(os.getpid()), timeout=10)


def checkpointed(folder: str, trial: dict[str, Any]) -> dict[str, Any]:
    """Six tracked steps; trial 1 fails after step 3 the first time it runs."""
    import torch
    import torch_xla

    Path(folder, f"started-{trial['n']}-{time.monotonic_ns()}").touch()
    device = torch_xla.device()
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 2).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=trial["lr"], momentum=0.9)
    start = tpu_nb.checkpoint.track(model=layer, optimizer=optimizer)
    for step in range(start, 6):
        loss = layer(torch.randn(4, 8, generator=torch.Generator().manual_seed(step)).to(device)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        tpu_nb.report(step=step, loss=loss)
        if trial["n"] == 1 and step == 3 and not Path(folder, "failed-once").exists():
            Path(folder, "failed-once").touch()
            raise RuntimeError("the session ended")
    return {"start": start, "weights": torch.cat([parameter.detach().cpu().flatten() for parameter in layer.parameters()])}


def test_a_resumed_sweep_reruns_only_unfinished_trials_each_from_its_own_checkpoint(tmp_path: Path) -> None:
    import torch

    checkpoints, marks = tmp_path / "checkpoints", tmp_path / "marks"
    marks.mkdir()
    trials = [{"n": 0, "lr": 0.1}, {"n": 1, "lr": 0.2}]
    first = tpu_nb.launch(checkpointed, str(marks), trials=trials, checkpoint=str(checkpoints), every="2steps")
    assert [outcome.status for outcome in first.trials] == ["done", "failed"]
    assert sorted((checkpoints / "trial-1").iterdir())  # its checkpoints, apart from trial 0's
    with pytest.raises(LaunchRefused, match="add --resume"):
        tpu_nb.launch(checkpointed, str(marks), trials=trials, checkpoint=str(checkpoints), every="2steps")
    resumed = tpu_nb.launch(checkpointed, str(marks), trials=trials, checkpoint=str(checkpoints), every="2steps", resume=True)
    assert [outcome.status for outcome in resumed.trials] == ["done earlier", "done"]
    assert resumed.trials[0].final["loss"] == first.trials[0].final["loss"]  # from the sweep's record, not rerun
    assert sorted(path.name.split("-")[1] for path in marks.glob("started-*")) == ["0", "1", "1"]
    value = resumed.values[1]
    assert value["start"] > 0  # resumed from its checkpoint, not from the start
    alone = tpu_nb.launch(checkpointed, str(marks), {"n": 2, "lr": 0.2}, cores=1)  # uninterrupted
    assert torch.equal(value["weights"], alone["weights"])


def loop_forever(trial: dict[str, Any]) -> None:
    step = 0
    while True:
        step += 1
        time.sleep(0.05)
        tpu_nb.report(step=step, loss=1.0)


def test_once_the_deadline_stops_a_trial_no_queued_trial_starts(capsys: pytest.CaptureFixture[str]) -> None:
    result = tpu_nb.launch(loop_forever, trials="n=0,1,2", cores_per_trial=4, deadline="6s")  # one world: a queue
    assert [outcome.status for outcome in result.trials] == ["stopped", "not started", "not started"]
    assert result.trials[0].ending is not None and "stopped by its deadline" in (result.trials[0].ending.text or "")
    assert "its deadline came: 2 queued trial(s) not started (--resume runs them later)" in capsys.readouterr().err


def test_checkpoint_options_without_a_directory_are_refused_before_any_trial_starts() -> None:
    with pytest.raises(LaunchRefused, match="--every needs --checkpoint DIR"):
        tpu_nb.launch(timed_fold, trials="folds=2", every="5steps")
    with pytest.raises(LaunchRefused, match="--resume needs --checkpoint DIR"):
        tpu_nb.launch(timed_fold, trials="folds=2", resume=True)
    assert not descendants(os.getpid())


def quick(trial: dict[str, Any]) -> int:
    time.sleep(trial.get("sleep", 0.0))
    tpu_nb.report(step=0, loss=trial["n"] / 10)
    return trial["n"]


def refused_in_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    name: str,
    code: int,
    matches: Callable[[tuple[Any, ...]], bool],
    only: int | None = None,
) -> None:
    """`module.name` raises the OSError the OS would (`code`) on the calls `matches` (only the `only`-th of them, if given),
    in this process only: the forked supervisors and workers call the real one."""
    real, kernel, matched = getattr(module, name), os.getpid(), [0]

    def refusing(*args: Any, **kwargs: Any) -> Any:
        if os.getpid() == kernel and matches(args):
            matched[0] += 1
            if only is None or matched[0] == only:
                raise OSError(code, os.strerror(code), str(args[0]) if args else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, refusing)


def full_for_the_record(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """The disk fills as sweep.json is written: its rename over the old one fails."""
    refused_in_the_kernel(monkeypatch, os, "replace", errno.ENOSPC, lambda args: Path(args[1]).name == RECORD)


def read_only(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """`directory` is a read-only mount: nothing in it can be created or written."""
    inside = str(directory)
    refused_in_the_kernel(monkeypatch, os, "mkdir", errno.EROFS, lambda args: str(args[0]).startswith(inside))
    writes = lambda args: str(args[0]).startswith(inside) and any(mode in str(args[1:2]) for mode in "wax")  # noqa: E731
    refused_in_the_kernel(monkeypatch, io, "open", errno.EROFS, writes)


@pytest.mark.parametrize("refusing", [full_for_the_record, read_only])
def test_a_record_the_directory_refuses_is_said_once_and_every_trial_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], refusing: Callable[..., None]
) -> None:
    refusing(monkeypatch, tmp_path)
    # Trial 0's record is refused while the two others still run.
    result = tpu_nb.launch(quick, trials=[{"n": 1}, {"n": 2, "sleep": 1.5}, {"n": 3, "sleep": 1.5}], checkpoint=str(tmp_path))
    assert result.values == [1, 2, 3]
    assert [outcome.status for outcome in result.trials] == ["done"] * 3
    err = capsys.readouterr().err
    assert err.count(f"tpu_nb: the sweep's record {tmp_path / RECORD} could not be written") == 1, err
    assert not (tmp_path / RECORD).exists()


def test_a_malformed_record_is_named_and_read_as_none_and_every_trial_comes_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / RECORD).write_text('{"trials": []}')
    result = tpu_nb.launch(quick, trials="n=1,2", checkpoint=str(tmp_path), resume=True)
    assert result.values == [1, 2]
    assert f'{tmp_path / RECORD} is not a sweep\'s record ("trials" is a list, not an object): read as no record' in capsys.readouterr().err
    assert set(json.loads((tmp_path / RECORD).read_text())["trials"]) == {"0", "1"}  # replaced as the trials ended


def test_a_trial_the_system_refuses_a_process_fails_alone_and_the_others_come_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refused_in_the_kernel(monkeypatch, os, "fork", errno.EAGAIN, lambda args: True, only=2)  # the second trial's supervisor
    result = tpu_nb.launch(quick, trials="n=1,2,3")
    assert result.values == [1, None, 3]
    assert [outcome.status for outcome in result.trials] == ["done", "failed", "done"]
    assert isinstance(result.trials[1].error, OSError)
    assert "tpu_nb: trial #1 (n=2) failed: tpu_nb could not start it: BlockingIOError: [Errno 11]" in capsys.readouterr().err
    assert not descendants(os.getpid())


def test_a_trial_whose_end_cannot_be_read_fails_alone_and_the_others_come_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first trial to end (n=1, no sleep) meets an I/O error reading its supervisor's report; the others end later.
    # (One reading its result's index ends as a result that could not be loaded: tests/wire/test_results.py.)
    refused_in_the_kernel(monkeypatch, io, "open", errno.EIO, lambda args: Path(args[0]).name == "supervisor.pkl", only=1)
    result = tpu_nb.launch(quick, trials=[{"n": 1}, {"n": 2, "sleep": 1.5}, {"n": 3, "sleep": 1.5}])
    assert result.values == [None, 2, 3]
    assert [outcome.status for outcome in result.trials] == ["failed", "done", "done"]
    assert result.trials[0].final == {"loss": 0.1}  # what it reported is kept
    assert "tpu_nb: trial #0 (n=1) failed: tpu_nb could not read how it ended: OSError: [Errno 5]" in capsys.readouterr().err
    assert not descendants(os.getpid())


class Told(TrialWatch):
    """A watch that notes each ending it is told of; `fails` raises after noting it."""

    what = "board"

    def __init__(self, fails: bool) -> None:
        self.told: list[str] = []
        self._fails = fails

    def ended(self, outcome: TrialOutcome) -> None:
        self.told.append(outcome.status)
        if self._fails:
            raise ValueError("the frontend is gone")


def test_a_failing_watch_is_said_once_and_the_watches_after_it_are_still_told() -> None:
    written: list[str] = []
    broken, after = Told(fails=True), Told(fails=False)
    watches = Watches([broken, after], lambda stream, text: written.append(text))
    for trial in parse_trials("n=1,2"):
        watches.ended(TrialOutcome(trial, "done", "cpu 0", None, (), 1.0))
    assert broken.told == after.told == ["done", "done"]
    assert written == ["tpu_nb: the sweep's board failed (ValueError: the frontend is gone); the trials go on.\n"]


def test_an_error_in_the_sweep_itself_ends_the_running_trials_and_says_which_had_ended_first(tmp_path: Path) -> None:
    written: list[str] = []

    def program_for(trial: Trial) -> FunctionProgram:
        if trial.number == 4:
            raise RuntimeError("planted: a bug in the sweep's caller")
        return FunctionProgram(quick, (), {"trial": dict(trial.values)})

    plan = plan_sweep([{"n": 1}, *({"n": n, "sleep": 60} for n in (2, 3, 4)), {"n": 5}], 1, None)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="planted"):
        run_sweep(plan, program_for, {"checkpoint": str(tmp_path), "progress": False}, "test", lambda stream, text: written.append(text))
    assert time.monotonic() - started < STARTUP
    said = "".join(written)
    assert (
        "the sweep stopped on an error in tpu_nb itself (below); 1 trial(s) had ended (#0 done loss=0.1), 3 running trial(s) were ended"
        in said
    )
    assert json.loads((tmp_path / RECORD).read_text())["trials"]["0"]["status"] == "done"
    assert wait_until(lambda: not descendants(os.getpid()), timeout=10)


def test_a_resumed_trial_whose_values_changed_starts_from_scratch_its_old_checkpoints_moved_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoints, marks = tmp_path / "checkpoints", tmp_path / "marks"
    marks.mkdir()
    first = tpu_nb.launch(checkpointed, str(marks), trials=[{"n": 1, "lr": 0.2}], checkpoint=str(checkpoints), every="2steps")
    assert [outcome.status for outcome in first.trials] == ["failed"]
    trained = sorted(path.name for path in (checkpoints / "trial-0").iterdir())
    capsys.readouterr()
    changed = [{"n": 1, "lr": 0.3}]  # the grid changed: trial 0 is another configuration now
    resumed = tpu_nb.launch(checkpointed, str(marks), trials=changed, checkpoint=str(checkpoints), every="2steps", resume=True)
    assert [outcome.status for outcome in resumed.trials] == ["done"]
    assert resumed.values[0]["start"] == 0  # from scratch, not from lr=0.2's checkpoint
    assert sorted(path.name for path in (checkpoints / "trial-0.earlier-1").iterdir()) == trained  # kept, moved aside
    assert (
        f"tpu_nb: trial #0 (n=1 lr=0.3): {checkpoints}/trial-0 was trained with {{'n': 1, 'lr': 0.2}}: moved to "
        f"{checkpoints}/trial-0.earlier-1, and the trial starts from scratch." in capsys.readouterr().err
    )


def a_trial_directory_trained_with(directory: Path, values: str) -> None:
    """What a sweep leaves in a trial's directory: its checkpoints (one, enough to count) and the values that trained them."""
    (directory / "checkpoint-2").mkdir(parents=True)
    record_values(str(directory), parse_trials(values)[0])


def test_a_refused_resume_leaves_a_changed_trials_directory_where_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a_trial_directory_trained_with(tmp_path / "trial-0", "lr=0.2")
    with pytest.raises(LaunchRefused, match="--every soon"):
        tpu_nb.launch(quick, trials="lr=0.3", checkpoint=str(tmp_path), resume=True, every="soon")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["trial-0"]
    for call in ("rename", "mkdir"):  # a directory the system will not let change (a read-only mount)
        refused_in_the_kernel(monkeypatch, os, call, errno.EROFS, lambda args: str(args[0]).startswith(str(tmp_path)))
    with pytest.raises(LaunchRefused, match=f"--resume: {tmp_path}/trial-0 was trained with other values and could not be moved aside"):
        tpu_nb.launch(quick, trials="lr=0.3", checkpoint=str(tmp_path), resume=True)
    assert not descendants(os.getpid())


def test_each_line_a_trial_prints_begins_with_its_number_a_progress_bar_s_redraw_too() -> None:
    written: list[tuple[str, str]] = []
    write = _prefixed(lambda stream, text: written.append((stream, text)), Trial(3, {"lr": 1e-5}))
    for stream, text in (("stdout", "step 1\nstep"), ("stderr", " 10%\r"), ("stdout", " 2\n"), ("stderr", " 20%\r"), ("stdout", "")):
        write(stream, text)

    assert written == [
        ("stdout", "[trial 3] step 1\n[trial 3] step"),
        ("stderr", "[trial 3]  10%\r"),
        ("stdout", " 2\n"),
        ("stderr", "[trial 3]  20%\r"),  # the bar is drawn again from the line's start: the number with it
    ]
