"""Searches on XLA:CPU: trials asked of an Optuna study as worlds free, pruned at a step boundary, told to the study; resumes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from optuna.trial import TrialState
from support.processes import descendants, interrupt_when, wait_until

import tpu_nb
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.history.log import log_directory, read_log
from tpu_nb.kernel.trials.comparison import MetricChoice
from tpu_nb.kernel.trials.search import RERUNS, STOPPED, VALUES, Search, resume_search
from tpu_nb.kernel.trials.spec import Trial
from tpu_nb.kernel.trials.sweep import StopAsked, TrialNotMade, TrialOutcome
from tpu_nb.wire.events import Progress
from tpu_nb.wire.stop_reason import StopReason

LOSS = MetricChoice("loss", larger_is_better=False)


@pytest.fixture(autouse=True)
def four_chips(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four XLA:CPU devices stand for a host's four chips: four worlds of one."""
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")


@pytest.fixture(autouse=True)
def quiet_optuna() -> None:
    """Optuna's own lines (a trial told, a study made) are the user's to turn on; these tests read tpu_nb's."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def study_of(*params: dict[str, Any], pruner: optuna.pruners.BasePruner | None = None, **options: Any) -> optuna.Study:
    """A study whose first trials are these parameters, in this order (the sampler's own choice after them)."""
    study = optuna.create_study(pruner=pruner or optuna.pruners.NopPruner(), **options)
    for values in params:
        study.enqueue_trial(values)
    return study


SEARCH_CELL = """%%tpu_train --trials study --n-trials 8 --space space --trials-metric eval_loss --return-best model
import time, torch
with torch.no_grad():
    model.weight.fill_(trial["x"])
for step in range(60 if trial["x"] < 0.5 else 400):  # the worse ones would train long
    time.sleep(0.05)
    evaluation = {"eval_loss": trial["x"] + 1 / (step + 1)} if step % 5 == 0 else {}
    report(step=step, loss=trial["x"], **evaluation)
trial["x"]
"""


def test_trials_the_pruner_stops_end_at_a_step_boundary_their_chips_take_new_ones_and_the_best_comes_back(
    ip: InteractiveShell,
) -> None:
    # The four worst first, on the four chips: at step 10 their eval_loss is over the threshold.
    study = study_of(
        *({"x": x} for x in (0.8, 0.7, 0.6, 0.5, 0.1, 0.2, 0.3, 0.4)), pruner=optuna.pruners.ThresholdPruner(upper=0.55, n_warmup_steps=10)
    )
    ip.user_ns.update(study=study, space=lambda trial: {"x": trial.suggest_float("x", 0.0, 1.0)})
    ip.run_cell("import torch\nmodel = torch.nn.Linear(4, 2)")
    with capture_output() as captured:
        cell = ip.run_cell(SEARCH_CELL)
    assert cell.success, captured.stdout + captured.stderr
    result = cell.result
    assert [outcome.status for outcome in result.trials] == ["pruned"] * 4 + ["done"] * 4
    for outcome in result.trials[:4]:
        stopped_at = int((outcome.ending.text or "").removeprefix("stopped by its pruner at step "))
        assert 10 <= stopped_at < 399, outcome.ending.text  # at a step boundary after step 10, not at its end
        assert f"trial #{outcome.trial.number} (x={outcome.trial.values['x']}) pruned at step 10 (eval_loss=" in captured.stderr
    # Each of the four others was asked of the study once a pruned trial had been told and its chip had freed.
    assert min(trial.datetime_start for trial in study.trials[4:]) >= min(trial.datetime_complete for trial in study.trials[:4])  # type: ignore[type-var]
    assert result.study is study
    assert [trial.state for trial in study.trials] == [TrialState.PRUNED] * 4 + [TrialState.COMPLETE] * 4
    assert all(10 in trial.intermediate_values for trial in study.trials)  # each evaluation told at its step
    assert sorted(study.trials[4].intermediate_values) == list(range(0, 60, 5))
    assert study.best_trial.params == {"x": 0.1} and study.best_trial.user_attrs[VALUES] == {"x": 0.1}
    assert result.best is not None and dict(result.best.trial.values) == {"x": 0.1}
    assert torch.equal(ip.user_ns["model"].weight, torch.full((2, 4), 0.1))  # the best trial's weights
    assert "--return-best: model from trial #4 (x=0.1)" in captured.stdout
    assert "pruned" in captured.stdout  # the board's line for each trial says how it ended
    logged = read_log(log_directory(None)).records[-8:]  # the run log: a record per trial, with its state
    assert sorted((record.trial["x"], record.status) for record in logged if record.trial) == [
        (x, "done" if x < 0.5 else "pruned") for x in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    ]
    assert not descendants(os.getpid())


def uneven(trial: dict[str, Any]) -> int:
    time.sleep(0.3)
    if trial["n"] == 2:
        raise ValueError("planted in trial two")
    if trial["n"] != 3:  # trial three reports nothing the study is told
        tpu_nb.report(step=0, loss=trial["n"] / 10)
    return int(trial["n"])


def test_a_failing_trial_and_one_without_the_metric_are_told_as_failed_and_the_search_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    study = study_of(*({"n": n} for n in (1, 2, 3)))
    result = tpu_nb.launch(uneven, trials=study, n_trials=3, space=lambda trial: {"n": trial.suggest_int("n", 1, 9)})
    assert [outcome.status for outcome in result.trials] == ["done", "failed", "done"]
    assert [trial.state for trial in study.trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.FAIL]
    assert result.values == [1, None, 3]
    err = capsys.readouterr().err
    assert "trial #1 (n=2) failed" in err and "planted in trial two" in err
    assert "trial #2 (n=3) finished without reporting loss: told to the study as failed" in err
    assert study.best_trial.number == 0


def space_of_n(trial: optuna.Trial) -> dict[str, Any]:
    return {"n": trial.suggest_int("n", 0, 9)}


def tracked(folder: str, trial: dict[str, Any]) -> dict[str, int]:
    """Trial 0 finishes at once; the others train until the folder holds "go", each step tracked and reported."""
    import torch_xla

    Path(folder, f"started-{trial['n']}-{time.monotonic_ns()}").touch()
    device = torch_xla.device()
    layer = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    start = tpu_nb.checkpoint.track(model=layer, optimizer=optimizer)
    step = start
    while trial["n"] >= 1 and not Path(folder, "go").exists():
        time.sleep(0.05)
        layer(torch.ones(2, 4, device=device)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        tpu_nb.report(step=step, loss=1.0 / (step + 1))
        if step == start + 3:
            Path(folder, f"running-{trial['n']}").touch()
        step += 1
    tpu_nb.report(step=step, loss=trial["n"] / 100)
    return {"n": trial["n"], "start": start}


def test_an_interrupt_keeps_what_finished_in_the_study_and_a_resume_runs_the_rest_from_their_checkpoints(tmp_path: Path) -> None:
    marks, checkpoints = tmp_path / "marks", tmp_path / "checkpoints"
    marks.mkdir()
    study = tpu_nb.study("interrupted", run_log=str(tmp_path / "log"))  # kept in tmp_path/log/studies.db, beside the run log
    for n in range(3):
        study.enqueue_trial({"n": n})

    def one_done_two_training() -> bool:
        return len(list(marks.glob("running-*"))) == 2 and len(study.get_trials(states=(TrialState.COMPLETE,))) == 1

    interrupt_when(one_done_two_training, (0.0,))
    first = tpu_nb.launch(tracked, str(marks), trials=study, n_trials=3, space=space_of_n, checkpoint=str(checkpoints))
    assert [outcome.status for outcome in first.trials] == ["done", "stopped", "stopped"]
    assert [trial.state for trial in study.trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.FAIL]  # none left running
    assert all(trial.user_attrs[STOPPED].startswith("stopped by the user at step") for trial in study.trials[1:])

    (marks / "go").touch()
    again = optuna.load_study(study_name="interrupted", storage=f"sqlite:///{tmp_path / 'log' / 'studies.db'}")  # as after a restart
    resumed = tpu_nb.launch(tracked, str(marks), trials=again, n_trials=3, space=space_of_n, checkpoint=str(checkpoints), resume=True)
    assert [outcome.status for outcome in resumed.trials] == ["done earlier", "done", "done"]
    assert [(outcome.trial.number, outcome.trial.continues) for outcome in resumed.trials[1:]] == [(3, 1), (4, 2)]
    assert all(value["start"] > 0 for value in resumed.values[1:])  # each from the checkpoint its stop saved
    assert [trial.user_attrs.get(RERUNS) for trial in again.trials[3:]] == [1, 2]
    assert [trial.state for trial in again.trials[3:]] == [TrialState.COMPLETE] * 2
    assert sorted(path.name.split("-")[1] for path in marks.glob("started-*")) == ["0", "1", "1", "2", "2"]  # #0 ran once
    assert wait_until(lambda: not descendants(os.getpid()), timeout=10)


def test_a_resume_runs_again_what_a_dead_kernel_left_running_and_counts_only_finished_trials() -> None:
    study = study_of({"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}, study_name="left")
    done, left_running, stopped, failed = (study.ask() for _ in range(4))
    for trial in (done, left_running, stopped, failed):
        space_of_n(trial)
    study.tell(done, 0.5)
    stopped.set_user_attr(STOPPED, "stopped by the user at step 4")
    study.tell(stopped, state=TrialState.FAIL)
    study.tell(failed, state=TrialState.FAIL)  # it raised: finished, not run again
    written: list[str] = []
    resumed = resume_search(study, 6, LOSS, lambda stream, text: written.append(text))
    assert [(outcome.trial.number, outcome.status) for outcome in resumed.earlier] == [(0, "done earlier"), (3, "failed earlier")]
    assert resumed.earlier[0].final == {"loss": 0.5}
    assert (resumed.to_run, resumed.again) == (4, (1, 2))
    assert study.trials[1].state == TrialState.FAIL  # its kernel ended: told, and queued again with its parameters
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 2
    assert written == [
        "tpu_nb: --resume: study 'left' holds 2 finished trial(s) of 6; 4 to run, first trial(s) #1, #2 again (unfinished).\n"
    ]
    again = resume_search(study, 6, LOSS, lambda stream, text: None)
    assert (again.to_run, again.again) == (4, ())  # already queued: not twice
    queued = [study.ask(), study.ask()]
    assert [(space_of_n(trial), trial.user_attrs[RERUNS]) for trial in queued] == [({"n": 1}, 1), ({"n": 2}, 2)]  # asked first


def test_each_ending_is_told_to_the_study_as_its_state_and_none_is_left_running() -> None:
    study = study_of(*({"n": n} for n in range(6)), pruner=optuna.pruners.ThresholdPruner(upper=1.0), study_name="told")
    search = Search(study, space_of_n, 6, LOSS, lambda stream, text: None)
    trials = [search.take() for _ in range(6)]
    assert search.take() is None and all(trial is not None for trial in trials)
    done, pruned, pruned_then_ended_hard, stopped, failed, _never_told = trials  # type: ignore[misc]
    for trial, loss in ((done, 0.5), (pruned, 2.0), (pruned_then_ended_hard, 3.0)):
        search.on_event(trial, Progress(0, 3, {"loss": loss}))
    assert search.stop_for(done) is None
    assert search.stop_for(pruned) == StopAsked(StopReason.PRUNED, "pruned at step 3 (loss=2)")

    def ending(trial: Trial, status: str, text: str | None = None, **final: float) -> TrialOutcome:
        return TrialOutcome(trial, status, "cpu 0", Ending(status, text, None), ({"step": 3, **final},), 1.0)  # type: ignore[arg-type]

    search.ended(ending(done, "done", loss=0.5))
    search.ended(ending(pruned, "pruned", "stopped by its pruner at step 4", loss=2.0))
    search.ended(ending(pruned_then_ended_hard, "interrupted", "interrupted after 9.0s at step 5"))  # no boundary in the stop's wait
    search.ended(ending(stopped, "stopped", "stopped by the user at step 7"))
    search.ended(ending(failed, "failed", "rank 0 raised ValueError: planted"))
    search.close()
    states = [(trial.state, trial.value, trial.user_attrs.get(STOPPED)) for trial in study.trials]
    assert states == [
        (TrialState.COMPLETE, 0.5, None),
        (TrialState.PRUNED, 2.0, None),
        (TrialState.PRUNED, 3.0, None),
        (TrialState.FAIL, None, "stopped by the user at step 7"),  # unfinished: --resume runs it again
        (TrialState.FAIL, None, None),
        (TrialState.FAIL, None, "the search ended before it did"),
    ]
    assert [trial.user_attrs[VALUES] for trial in study.trials] == [{"n": n} for n in range(6)]


def test_a_space_that_raises_fails_its_trial_and_the_study_is_told() -> None:
    study = study_of(study_name="broken")
    written: list[str] = []
    search = Search(study, lambda trial: {"lr": trial.params["lr"]}, 2, LOSS, lambda stream, text: written.append(text))
    with pytest.raises(TrialNotMade) as made:
        search.take()
    assert isinstance(made.value.error, KeyError) and made.value.outcome.status == "failed"
    assert written == ["tpu_nb: trial #0 failed: its space raised KeyError: 'lr'\n"]
    listed = Search(study, lambda trial: [1e-4], 1, LOSS, lambda stream, text: written.append(text))
    with pytest.raises(TrialNotMade, match="the space returned a list; return a dict of the trial's values"):
        listed.take()
    assert [trial.state for trial in study.trials] == [TrialState.FAIL, TrialState.FAIL]
