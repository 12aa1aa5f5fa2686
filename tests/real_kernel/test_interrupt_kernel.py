"""Interrupting `%%tpu_train` in a real kernel the way Jupyter does."""

from __future__ import annotations

import time

from support.kernel import Kernel, errors_of, text_of
from support.processes import descendants, wait_until

TRAIN_FOREVER = """%%tpu_train
import time
import torch
x = torch.zeros(2, device=device)
print("training", flush=True)
while True:
    x = x + 1
    time.sleep(0.05)
"""


def test_interrupt_stops_every_worker_and_the_next_run_works(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    cell, interrupted_at = kernel.run_and_interrupt(TRAIN_FOREVER, when="training")
    assert wait_until(lambda: not descendants(kernel.pid), timeout=10), descendants(kernel.pid)
    assert time.monotonic() - interrupted_at < 10
    [error] = errors_of(cell)
    assert error.ename == "TrainingInterrupted"
    assert "interrupted" in error.evalue and "every worker was stopped" in error.evalue

    again = kernel.run("%%tpu_train\nimport torch\n(torch.ones(3, device=device) * 2).sum().item()")
    assert not errors_of(again), text_of(again)
    assert "6.0" in text_of(again)
