"""A kernel kept warm between runs, and left as the user had it: no torch_xla, no runtime, no new threads, the same settings."""

from __future__ import annotations

from support.kernel import Kernel, errors_of, text_of
from support.processes import descendants, wait_until

SNAPSHOT = """
import os, sys, threading, torch
def kernel_state():
    import torch._dynamo.config as dynamo  # imported here if not yet: a setting torch_xla's import would change
    return {"environ": dict(os.environ), "threads": len(os.listdir("/proc/self/task")),
            "torch_xla": "torch_xla" in sys.modules, "automatic_dynamic_shapes": dynamo.automatic_dynamic_shapes}
"""

TRAIN_UNTIL_STOPPED = """%%tpu_train --no-progress
import time
import torch
x = torch.zeros(2, device=device)
print("training", flush=True)
for step in range(100_000):
    x = x + 1
    time.sleep(0.02)
    report(step=step)
"""


def test_after_a_run_the_kernel_has_what_torch_xla_builds_on_but_not_torch_xla(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(SNAPSHOT, allow_errors=False)
    kernel.run("before = kernel_state()\nprint(before['torch_xla'], 'torch._inductor' in sys.modules)", allow_errors=False)
    first = kernel.run("%%tpu_train --no-progress\nimport torch_xla\n(torch.ones(2, device=device) * 3).sum().item()")
    assert "6.0" in text_of(first), text_of(first)
    check = kernel.run(
        "import tpu_nb.kernel.warm_imports as warm\n"
        "from tpu_nb.runtime.system import xla_runtime_started\n"
        "warm.wait()\n"
        "after = kernel_state()\n"
        "print('WARM', 'torch._inductor' in sys.modules, 'torch._dynamo' in sys.modules)\n"
        "print('TORCH_XLA', after['torch_xla'], xla_runtime_started(sys.modules))\n"
        "print('SAME', after['environ'] == before['environ'], after['automatic_dynamic_shapes'] == before['automatic_dynamic_shapes'])\n"
        "print('NO NEW THREADS', after['threads'] <= before['threads'])",
        allow_errors=False,
    )
    text = text_of(check)
    assert "WARM True True" in text and "TORCH_XLA False False" in text and "SAME True True" in text, text
    assert "NO NEW THREADS True" in text, text
    second = kernel.run("%%tpu_train --no-progress\nimport torch_xla.core.xla_model as xm\n(torch.ones(2, device=device) * 4).sum().item()")
    assert "8.0" in text_of(second), text_of(second)


def test_twenty_interrupt_cycles_leave_nothing_behind(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    for cycle in range(20):
        cell, _ = kernel.run_and_interrupt(TRAIN_UNTIL_STOPPED, when="training")
        assert not errors_of(cell), (cycle, text_of(cell))  # a graceful stop at the next report()
        assert wait_until(lambda: not descendants(kernel.pid), timeout=10), (cycle, descendants(kernel.pid))
    state = kernel.run(
        "import glob, os, sys, tempfile\n"
        "from tpu_nb.runtime.system import xla_runtime_started\n"
        "print('LEFT', glob.glob(f'/dev/shm/tpu_nb-{os.getpid()}-*') + glob.glob(f'{tempfile.gettempdir()}/tpu_nb-*-{os.getpid()}-*'))\n"
        "print('RUNTIME', xla_runtime_started(sys.modules), 'torch_xla' in sys.modules)",
        allow_errors=False,
    )
    assert "LEFT []" in text_of(state) and "RUNTIME False False" in text_of(state), text_of(state)
