"""Runs that outlive their session, in a real kernel: stopped by a deadline, resumed to the end.

Each resumed run must end with the weights of a run that was never stopped
(same steps, same seeds, dropout included), its loss curve joined to the
one saved before the stop. The loop's resume comes after a kernel restart,
as a new session's would; the SPMD loop and the Trainer resume in the same
kernel, since what they add is sharded state and the Trainer's own
checkpoints, not the restart (tutorial 06 restarts its kernel before a
Trainer resumes, and its test checks that).
"""

from __future__ import annotations

import re
from pathlib import Path

from support.kernel import Kernel, errors_of, text_of
from test_dashboard_kernel import TRAINER_SETUP

STEPS = 40

LOOP = """%%tpu_train --return final {options}
import time, torch, torch_xla, tpu_nb
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.1), torch.nn.Linear(32, 8)).to(device)
{shard}
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters={steps})
start = tpu_nb.checkpoint.track(model=model, optimizer=optimizer, scheduler=scheduler)
features = torch.randn(640, 8, generator=torch.Generator().manual_seed(1))
data = torch.utils.data.TensorDataset(features, features.roll(1, dims=1))
loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(2))
for step, (x, y) in enumerate(tpu_nb.checkpoint.skip(loader, start), start=start):
    loss = (model(x.to(device)) - y.to(device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    torch_xla.sync()
    time.sleep({pause})
    try:
        report(step=step, loss=loss, max_steps={steps})
    except tpu_nb.StopTraining as stop:
        print("worker:", stop, flush=True)  # the worker's own words for who stopped it
        raise
final = {{name: tensor.cpu() for name, tensor in model.state_dict().items()}}
"""

KEEP = """import torch
torch.save({name}, {path!r})
"""

SAME = """import torch
reference = torch.load({path!r})
print("largest difference", max(float((reference[name] - {name}[name]).abs().max()) for name in reference))
"""


TRAINER_STEPS = 36  # over an epoch's end: 28 steps of 16 rows make one

TRAINER = """%%tpu_train --return weights {options}
import time
from transformers import TrainerCallback

class Pace(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        time.sleep({pause})

args = TrainingArguments(output_dir, per_device_train_batch_size=16, max_steps={steps}, logging_steps=2, report_to=[],
                         save_strategy="no", seed=0)
trainer = Trainer(model=model, args=args, train_dataset=train_data, callbacks=[Pace()])
trainer.train()
weights = {{name: tensor.cpu() for name, tensor in trainer.model.state_dict().items()}}
"""

LOSES_THE_TRAINING = """%%tpu_train --checkpoint {checkpoints} --every 4steps
import os
from safetensors.torch import save_file
starting = {{name: tensor.clone().contiguous() for name, tensor in model.state_dict().items()}}

class SavesTheBaseModel(Trainer):
    def save_model(self, output_dir=None, _internal_call=False):
        os.makedirs(output_dir, exist_ok=True)
        save_file(starting, os.path.join(output_dir, "model.safetensors"))  # what transformers #36004 reloads

args = TrainingArguments(output_dir, per_device_train_batch_size=16, max_steps=8, report_to=[], seed=0)
SavesTheBaseModel(model=model, args=args, train_dataset=train_data).train().global_step
"""


def loop(options: str, pause: float = 0.0, spmd: bool = False) -> str:
    shard = "tpu_nb.spmd.shard_model(model)" if spmd else ""
    return LOOP.format(options=options, shard=shard, steps=STEPS, pause=pause)


def largest_difference(kernel: Kernel, reference: Path, name: str = "final") -> float:
    said = text_of(kernel.run(SAME.format(path=str(reference), name=name), allow_errors=False))
    return float(said.split("largest difference")[1])


def summary_html(cell: object) -> str:
    [summary] = [
        output for output in cell.outputs if "text/html" in output.get("data", {}) and "tpu-nb-summary" in output.data["text/html"]
    ]  # type: ignore[attr-defined]
    return str(summary.data["text/html"])


def logged_steps(html: str) -> list[int]:
    """The steps of the summary's table of logged rows (its longest one: all rows)."""
    tables = re.findall(r"<table.*?</table>", html, flags=re.S)
    longest = max(tables, key=len)
    return [int(step) for step in re.findall(r"<tr><td[^>]*>(\d+)</td>", longest)]


def test_a_loop_stopped_by_its_deadline_resumes_after_a_restart_and_past_a_damaged_checkpoint(kernel: Kernel, tmp_path: Path) -> None:
    checkpoints, reference = tmp_path / "checkpoints", tmp_path / "reference.pt"
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    uninterrupted = kernel.run(loop("--no-progress"), timeout=180)
    assert not errors_of(uninterrupted), text_of(uninterrupted)
    kernel.run(KEEP.format(path=str(reference), name="final"), allow_errors=False)

    stopped = kernel.run(loop(f"--checkpoint {checkpoints} --every 10steps --keep 2 --deadline 12s", pause=0.3), timeout=180)
    assert not errors_of(stopped), text_of(stopped)
    assert "tpu_nb: stopping now, with a checkpoint: deadline" in text_of(stopped)
    stop_step = int(re.search(r"stopped by its deadline at step (\d+)", text_of(stopped))[1])  # type: ignore[index]
    assert 0 <= stop_step < STEPS - 1
    listing = text_of(kernel.run(f"%tpu_checkpoints {checkpoints}", allow_errors=False))
    rows = [line.split() for line in listing.splitlines()[2:]]
    assert len(rows) == 2 and all(row[-1] == "verified" for row in rows), listing  # --keep 2
    assert int(rows[-1][0]) == stop_step  # the stop's own checkpoint is the newest
    saved_steps = logged_steps(summary_html(stopped))

    kernel.restart()
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    resumed = kernel.run(loop(f"--checkpoint {checkpoints} --every 10steps --resume"), timeout=180)
    assert not errors_of(resumed), text_of(resumed)
    html = summary_html(resumed)
    assert f"resumed from {checkpoints}/checkpoint-{stop_step} (step {stop_step})" in html
    assert f"resumed at step {stop_step + 1}: its first {stop_step + 1} batches were read and dropped" in html
    steps = logged_steps(html)
    assert steps[: len(saved_steps)] == saved_steps and steps[-1] == STEPS - 1  # the curve goes on from the saved one
    assert largest_difference(kernel, reference) <= 1e-5

    # The newest checkpoint damaged after it was saved (a sync to Drive cut short): found, said, passed over.
    newest = checkpoints / f"checkpoint-{STEPS - 1}" / "state.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    listing = text_of(kernel.run(f"%tpu_checkpoints {checkpoints}", allow_errors=False))
    assert re.search(rf"^{STEPS - 1} .*damaged since it was saved: state.pt is 1,000 bytes, was [\d,]+ when saved$", listing, re.M), listing
    again = kernel.run(loop(f"--checkpoint {checkpoints} --every 10steps --resume"), timeout=180)
    assert not errors_of(again), text_of(again)
    passed_over = f"resumed from {checkpoints}/checkpoint-30 (step 30); passed over checkpoint-{STEPS - 1}: damaged since it was saved"
    assert passed_over in summary_html(again)
    assert largest_difference(kernel, reference) <= 1e-5


def test_an_spmd_loop_stopped_by_its_deadline_resumes_to_the_uninterrupted_weights(kernel: Kernel, tmp_path: Path) -> None:
    checkpoints, reference = tmp_path / "checkpoints", tmp_path / "reference.pt"
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    uninterrupted = kernel.run(loop("--spmd --cores 4 --no-progress", spmd=True), timeout=180)
    assert not errors_of(uninterrupted), text_of(uninterrupted)
    kernel.run(KEEP.format(path=str(reference), name="final"), allow_errors=False)
    stopped = kernel.run(
        loop(f"--spmd --cores 4 --checkpoint {checkpoints} --every 10steps --deadline 12s", pause=0.3, spmd=True), timeout=180
    )
    # The worker and the summary both say the deadline stopped it, not the user (the worker used to say the user).
    said = re.search(r"worker: stopped by (.+?) at step (\d+)", text_of(stopped))
    assert said is not None and said[1] == "its deadline", text_of(stopped)
    assert f"stopped by its deadline at step {said[2]}" in summary_html(stopped)
    resumed = kernel.run(loop(f"--spmd --cores 4 --checkpoint {checkpoints} --resume", spmd=True), timeout=180)
    assert not errors_of(resumed), text_of(resumed)
    assert "resumed from" in summary_html(resumed)
    assert largest_difference(kernel, reference) <= 1e-5


def trainer(options: str, pause: float = 0.0) -> str:
    return TRAINER.format(options=options, pause=pause, steps=TRAINER_STEPS)


def test_a_trainer_stopped_by_its_deadline_resumes_to_the_uninterrupted_weights(kernel: Kernel, tmp_path: Path) -> None:
    checkpoints, reference = tmp_path / "checkpoints", tmp_path / "reference.pt"
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(TRAINER_SETUP, allow_errors=False)
    uninterrupted = kernel.run(trainer("--no-progress"), timeout=300)
    assert not errors_of(uninterrupted), text_of(uninterrupted)
    kernel.run(KEEP.format(path=str(reference), name="weights"), allow_errors=False)

    stopped = kernel.run(trainer(f"--checkpoint {checkpoints} --every 10steps --deadline 15s", pause=0.3), timeout=300)
    assert not errors_of(stopped), text_of(stopped)
    stop_step = int(re.search(r"stopped by its deadline at step (\d+)", text_of(stopped))[1])  # type: ignore[index]
    assert 0 < stop_step < TRAINER_STEPS
    listing = text_of(kernel.run(f"%tpu_checkpoints {checkpoints}", allow_errors=False))
    assert re.search(rf"^{stop_step} .* verified$", listing, flags=re.M), listing  # the Trainer saved as it stopped
    # The curve up to the checkpoint (the row the stopped run logged at its end, train_loss, came after it).
    saved_steps = [step for step in logged_steps(summary_html(stopped)) if step < stop_step]

    resumed = kernel.run(trainer(f"--checkpoint {checkpoints} --every 10steps --resume"), timeout=300)
    assert not errors_of(resumed), text_of(resumed)
    html = summary_html(resumed)
    assert f"resumed from {checkpoints}/checkpoint-{stop_step} (step {stop_step})" in html
    steps = logged_steps(html)
    assert saved_steps and steps[: len(saved_steps)] == saved_steps and steps[-1] == TRAINER_STEPS
    assert largest_difference(kernel, reference, "weights") <= 1e-5


def test_a_trainer_checkpoint_that_holds_the_base_model_is_flagged_and_never_resumed_from(kernel: Kernel, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(TRAINER_SETUP, allow_errors=False)
    cell = kernel.run(LOSES_THE_TRAINING.format(checkpoints=checkpoints), timeout=300)
    assert not errors_of(cell), text_of(cell)
    flagged = "failed its check: its weights equal the starting ones: it would reload as the model before training (transformers #36004)"
    assert "the checkpoint at step 4 failed its check: its weights equal the starting ones" in summary_html(cell)
    listing = text_of(kernel.run(f"%tpu_checkpoints {checkpoints}", allow_errors=False))
    assert len(re.findall(re.escape(flagged), listing)) == 2, listing  # steps 4 and 8
    refused = kernel.run(f"%%tpu_train --checkpoint {checkpoints} --resume\n1")
    assert [error.ename for error in errors_of(refused)] == ["LaunchRefused"]
    assert "holds no verified checkpoint (checkpoint-4: failed its check" in text_of(refused)
