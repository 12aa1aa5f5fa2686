"""Sweeps in a real kernel: `%%tpu_train --trials` with an unchanged Trainer, four XLA:CPU devices standing for four chips; a
search resumed from its study after the kernel died."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from nbclient.exceptions import DeadKernelError
from support.kernel import Kernel, errors_of, started_kernel, text_of
from support.processes import descendants, wait_until
from test_dashboard_kernel import TRAINER_SETUP


@pytest.fixture(scope="module")
def module_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """The module's kernel sees four devices (four worlds of one) and keeps a run log of its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CPU_NUM_DEVICES", "4")
        patch.setenv("TPU_NB_RUN_LOG", str(tmp_path_factory.mktemp("trials_run_log")))
        with started_kernel() as kernel:
            yield kernel


TRAINER_TRIAL = """%%tpu_train {options}
args = TrainingArguments(f"{{output_dir}}/{{trial['lr']}}-{{trial['seed']}}", learning_rate=trial["lr"], seed=trial["seed"],
                         per_device_train_batch_size=16, max_steps=8, logging_steps=2, eval_strategy="steps", eval_steps=4,
                         report_to=[], save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=train_data, eval_dataset=eval_data)
trainer.train()
weights = {{name: tensor.cpu() for name, tensor in trainer.model.state_dict().items()}}
"""

CHECK = """import torch
assert len(weights) == 4 and all(isinstance(w, dict) for w in weights)
print("trials differ:", not torch.equal(weights[0]["classifier.weight"], weights[3]["classifier.weight"]))
print("same as alone:", all(torch.equal(weights[3][name], alone[name]) for name in alone))
best = sweep.best.trial.number
print("best:", best, sweep.best.trial.values)
print("model is best:", all(torch.equal(model.state_dict()[name], weights[best][name]) for name in weights[best]))
print("statuses:", [outcome.status for outcome in sweep.trials])
"""


def test_a_grid_of_four_trainers_runs_side_by_side_and_the_best_comes_back(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(TRAINER_SETUP + "\ntrial = {'lr': 3e-3, 'seed': 1}\n", allow_errors=False)
    alone = kernel.run(TRAINER_TRIAL.format(options="--cores 1 --return alone") + "alone = weights\n", timeout=300)
    assert not errors_of(alone), text_of(alone)
    sweep = kernel.run(
        TRAINER_TRIAL.format(options='--trials "lr=1e-3,3e-3 seed=0,1" --trials-metric eval_loss --return weights --return-best model'),
        timeout=600,
    )
    assert not errors_of(sweep), text_of(sweep)
    boards = [output for output in sweep.outputs if "tpu-nb-sweep" in output.get("data", {}).get("text/html", "")]
    assert boards, "the sweep's board"
    assert "<img" in boards[-1]["data"]["text/html"]  # a curve per trial
    board_text = boards[-1]["data"]["text/plain"]
    assert "4 trials, 4 at a time" in board_text and "trials by eval_loss (lower is better)" in board_text
    assert "from trial #" in text_of(sweep)
    checked = kernel.run("sweep = _\n" + CHECK, allow_errors=False)
    out = text_of(checked)
    assert "trials differ: True" in out and "same as alone: True" in out and "model is best: True" in out
    assert "statuses: ['done', 'done', 'done', 'done']" in out
    listed = kernel.run("%tpu_runs --last 5 --metric eval_loss", allow_errors=False)
    table = listed.outputs[0]["data"]
    assert "<img" in table["text/html"] and "best eval_loss" in table["text/html"]
    rows = table["text/plain"].splitlines()
    assert len(rows) == 5 and all("%%tpu_train --trials trial #" in row for row in rows[1:])
    assert sum("(lr=0.003 seed=1)" in row for row in rows) == 1


LOOPING_TRIALS = """%%tpu_train --trials "n=0,1,2,3,4,5"
import time
step = 0
while True:
    step += 1
    time.sleep(0.05)
    report(step=step, loss=1.0 / step)
    if step == 5:
        print("running", trial["n"])
"""


def test_an_interrupt_stops_the_running_trials_gracefully_and_starts_no_queued_one(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    cell, _ = kernel.run_and_interrupt(LOOPING_TRIALS, when="running 3", timeout=300)
    assert not errors_of(cell), text_of(cell)
    out = text_of(cell)
    assert "stopping 4 running trial(s) at their next step boundary" in out
    result = kernel.run("print([outcome.status for outcome in _.trials])", allow_errors=False)
    assert "['stopped', 'stopped', 'stopped', 'stopped', 'not started', 'not started']" in text_of(result)
    assert wait_until(lambda: not descendants(kernel.pid), timeout=30)


SEARCH_SETUP = """import optuna, tpu_nb
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = tpu_nb.study("restarted", run_log={log!r})
def space(trial):
    return {{"x": trial.suggest_float("x", 0.0, 1.0)}}
"""

SEARCH = """%%tpu_train --trials study --n-trials 2 --space space {resume}
import pathlib, time
pathlib.Path({marks!r}, f"started-{{trial['x']}}-{{time.monotonic_ns()}}").touch()
step = 0
while trial["x"] > 0.2 and not pathlib.Path({marks!r}, "restarted").exists():  # the first finishes at once
    step += 1
    time.sleep(0.05)
    report(step=step, loss=trial["x"])
    if step == 3:
        pathlib.Path({marks!r}, "training").touch()
report(step=step + 1, loss=trial["x"])
"""


def test_a_search_resumes_from_its_study_after_the_kernel_died_and_runs_no_finished_trial_again(kernel: Kernel, tmp_path: Path) -> None:
    marks, storage = tmp_path / "marks", f"sqlite:///{tmp_path / 'studies.db'}"
    marks.mkdir()
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(SEARCH_SETUP.format(log=str(tmp_path)) + "for x in (0.1, 0.3): study.enqueue_trial({'x': x})\n", allow_errors=False)
    dying = kernel.pid
    trials: list[int] = []

    def one_done_one_training() -> bool:
        if not (marks / "training").exists():
            return False
        study = optuna.load_study(study_name="restarted", storage=storage)
        return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))) == 1

    def kill_once_one_is_done() -> None:
        if wait_until(one_done_one_training, timeout=300):
            trials.extend(descendants(dying))
            os.kill(dying, signal.SIGKILL)  # the kernel dies (out of memory, say): one trial done, the other training

    killer = threading.Thread(target=kill_once_one_is_done, daemon=True)
    killer.start()
    with pytest.raises(DeadKernelError):
        kernel.run(SEARCH.format(resume="", marks=str(marks)), timeout=300)
    killer.join()
    assert trials and wait_until(lambda: not any(alive(pid) for pid in trials), timeout=30)  # its trial died with it

    kernel.restart()
    (marks / "restarted").touch()
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(SEARCH_SETUP.format(log=str(tmp_path)), allow_errors=False)  # the same cell: the study found in studies.db
    resumed = kernel.run(SEARCH.format(resume="--resume", marks=str(marks)), timeout=300)
    assert not errors_of(resumed), text_of(resumed)
    said = text_of(resumed)
    assert "--resume: study 'restarted' holds 1 finished trial(s) of 2; 1 to run, first trial(s) #1 again (unfinished)" in said
    checked = kernel.run(
        "print([(outcome.trial.number, outcome.status) for outcome in _.trials])\n"
        "print([(trial.number, trial.state.name, trial.params['x']) for trial in study.trials])",
        allow_errors=False,
    )
    outcomes, states = text_of(checked).splitlines()
    assert outcomes == "[(0, 'done earlier'), (2, 'done')]"
    assert states == str([(0, "COMPLETE", 0.1), (1, "FAIL", 0.3), (2, "COMPLETE", 0.3)])  # #1, left running: failed, and run again
    started = sorted(path.name.split("-")[1] for path in marks.glob("started-*"))
    assert started == ["0.1", "0.3", "0.3"]  # the finished one ran once
    assert wait_until(lambda: not descendants(kernel.pid), timeout=30)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
