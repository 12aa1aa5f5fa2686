"""A backward() in the notebook's own process, then one in a worker: the failure says why and what to do."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tpu_nb.kernel.endings.autograd_fork import explain_autograd_fork

NOTEBOOK = textwrap.dedent(
    """
    import torch, tpu_nb
    from tpu_nb.kernel.endings.notebook_errors import WorkerError

    check = torch.nn.Linear(4, 1)
    check(torch.ones(2, 4)).sum().backward()  # a quick look at the model on the CPU, in the kernel

    def train():
        import torch, torch_xla
        device = torch_xla.device()
        model = torch.nn.Linear(4, 1).to(device)
        model(torch.ones(2, 4, device=device)).sum().backward()

    try:
        tpu_nb.launch(train, progress=False)
    except WorkerError as error:
        print("".join(error._render_traceback_()))
    """
)


def test_a_worker_after_autograd_in_the_kernel_fails_with_the_fix() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK], capture_output=True, text=True, timeout=180, env=dict(os.environ, PJRT_DEVICE="CPU")
    )
    assert "device_ready_queues_" in done.stdout, done.stdout + done.stderr
    assert "This notebook's own process ran backward() before" in done.stdout
    assert "Fix: restart the kernel, and run backward() (or trainer.train()) only inside %%tpu_train" in done.stdout


def test_other_errors_get_no_such_advice() -> None:
    assert explain_autograd_fork("RuntimeError: shapes (2, 4) and (3, 1) do not match") is None
