"""Sweeps in a real kernel: `%%tpu_train --trials` with an unchanged Trainer, four XLA:CPU devices standing for four chips."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
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
