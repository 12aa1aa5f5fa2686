"""Steps as long as a TPU's that evaluate, save or compile (seconds), in a real kernel: a stop waits for them.

The fixed grace (`--stop-grace`, 5 s) is shorter than every step here: a
stop that waited only that long ended these runs hard and lost their last
checkpoint and their weights.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.kernel import Kernel, errors_of, text_of
from support.processes import descendants
from test_dashboard_kernel import TRAINER_SETUP

from tpu_nb.wire.checkpoints import list_checkpoints

SEVEN_SECOND_STEPS = """%%tpu_train --checkpoint {checkpoints} --every 1000steps --deadline 40s
import time, torch, torch_xla, tpu_nb
model = torch.nn.Linear(8, 8).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
tpu_nb.checkpoint.track(model=model, optimizer=optimizer)
for step in range(1, 1000):
    loss = model(torch.ones(4, 8, device=device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    time.sleep(7)  # what a TPU step that evaluates or compiles takes
    report(step=step, loss=loss)
"""


def test_a_deadline_with_seven_second_steps_ends_with_a_verified_checkpoint_of_the_last_step(kernel: Kernel, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    cell = kernel.run(SEVEN_SECOND_STEPS.format(checkpoints=checkpoints), timeout=180)
    said = text_of(cell)
    assert not errors_of(cell), said
    assert "tpu_nb: stopping now, with a checkpoint: deadline" in said and "SIGKILL" not in said
    stop_step = int(re.search(r"stopped by its deadline at step (\d+)", said)[1])  # type: ignore[index]
    [checkpoint] = list_checkpoints(str(checkpoints))
    assert checkpoint.verified and checkpoint.step == stop_step, checkpoint  # six steps of training kept, not lost
    assert not descendants(kernel.pid)


SLOW_EVALUATION = """%%tpu_train --return model
import time
from transformers import TrainerCallback

class SlowToRead(torch.utils.data.Dataset):
    # A validation set read from a slow disk: its evaluation takes about 9 s, longer than --stop-grace.
    def __len__(self):
        return len(eval_data)

    def __getitem__(self, index):
        if index == 0:
            print("evaluating", flush=True)
        time.sleep(0.15)
        return eval_data[index]

args = TrainingArguments(output_dir, per_device_train_batch_size=16, per_device_eval_batch_size=16, max_steps=100000,
                         eval_strategy="steps", eval_steps=6, logging_steps=2, report_to=[], save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=train_data, eval_dataset=SlowToRead())
trainer.train()
print("stopped at", trainer.state.global_step)
"""


def test_an_interrupt_during_a_long_trainer_evaluation_waits_for_it_and_the_model_comes_back(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(TRAINER_SETUP + "\ninitial = {k: v.clone() for k, v in model.state_dict().items()}", allow_errors=False)
    cell, _ = kernel.run_and_interrupt(SLOW_EVALUATION, when="evaluating", timeout=300)
    said = text_of(cell)
    assert not errors_of(cell), said
    # What the stop waits for, said: the evaluation (or the compilation of its graph), or the steps it learned.
    assert re.search(r"stopping at the next step boundary every worker reaches after step \d+: (a rank is|a step takes about)", said), said
    stopped_at = int(re.search(r"stopped at (\d+)", said)[1])  # type: ignore[index]
    assert stopped_at >= 6 and "updated `model` in place" in said
    changed = kernel.run("print(any(not torch.equal(initial[k], v) for k, v in model.state_dict().items()))", allow_errors=False)
    assert text_of(changed).strip() == "True"
    assert not descendants(kernel.pid)
