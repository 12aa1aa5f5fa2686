"""A real kernel whose `%%tpu_train` runs a process per device (tests/support/process_world.py), as on a TPU host.

The dashboard shows a row per process, and eight interrupts in a row, the
way Jupyter sends them, each stop every process gracefully and leave
nothing: no process, no run directory, and the XLA runtime still not
started in the kernel. (Each cycle starts 4 processes that join a gloo
world and compile: about 4 CPU-seconds, so twenty cost 87 of every suite.
Every cycle is checked, so a leak shows at the first; the repeats are
there for races.)
"""

from __future__ import annotations

from pathlib import Path

from support.kernel import Kernel, errors_of, text_of
from support.processes import descendants, wait_until

TESTS = Path(__file__).resolve().parents[1]

INSTALL = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from support.process_world import install
install()  # xmp.spawn forks a process per device from now on
"""

TRAIN_UNTIL_STOPPED = """%%tpu_train --cores 4
import time
import torch
import torch_xla.core.xla_model as xm
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(8, 4)
for step in range(100_000):
    model(data.to(device)).pow(2).mean().backward()
    xm.optimizer_step(optimizer)  # a collective across the 4 processes, every step
    optimizer.zero_grad()
    if step == 2:
        print("training", flush=True)
    time.sleep(0.02)
    report(step=step)
"""


def test_every_process_has_its_row_and_eight_interrupts_in_a_row_leave_nothing(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(INSTALL, allow_errors=False)
    for cycle in range(8):
        cell, _ = kernel.run_and_interrupt(TRAIN_UNTIL_STOPPED, when="training", timeout=180)
        assert not errors_of(cell), (cycle, text_of(cell))
        assert wait_until(lambda: not descendants(kernel.pid), timeout=10), (cycle, descendants(kernel.pid))
        if cycle == 0:
            summary = "".join(item.get("data", {}).get("text/html", "") for item in cell.outputs if item.output_type == "display_data")
            assert "stopped by the user at step" in summary
            assert all(f">{rank}</td>" in summary for rank in range(4)), summary  # a worker row per process
    state = kernel.run(
        "import glob, os, sys, tempfile\n"
        "from tpu_nb.runtime.system import xla_runtime_started\n"
        "print('LEFT', glob.glob(f'/dev/shm/tpu_nb-{os.getpid()}-*') + glob.glob(f'{tempfile.gettempdir()}/tpu_nb-*-{os.getpid()}-*'))\n"
        "print('RUNTIME STARTED', xla_runtime_started(sys.modules))",
        allow_errors=False,
    )
    assert "LEFT []" in text_of(state) and "RUNTIME STARTED False" in text_of(state), text_of(state)
