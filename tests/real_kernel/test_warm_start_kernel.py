"""A kernel kept warm between runs, and left as the user had it: no torch_xla, no runtime, no new threads, the same settings;
the cell after a run imports what it likes.

(Interrupt cycles leaving nothing: test_process_per_device_kernel.py, with a process per device.)
"""

from __future__ import annotations

import pytest
from support.kernel import Kernel, text_of

SNAPSHOT = """
import os, sys, threading, torch
def kernel_state():
    import torch._dynamo.config as dynamo  # imported here if not yet: a setting torch_xla's import would change
    return {"environ": dict(os.environ), "threads": len(os.listdir("/proc/self/task")),
            "torch_xla": "torch_xla" in sys.modules, "automatic_dynamic_shapes": dynamo.automatic_dynamic_shapes}
"""


@pytest.mark.fresh_kernel
def test_after_a_run_the_kernel_has_what_torch_xla_builds_on_but_not_torch_xla(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(SNAPSHOT, allow_errors=False)
    kernel.run("before = kernel_state()\nprint(before['torch_xla'], 'torch._inductor' in sys.modules)", allow_errors=False)
    first = kernel.run("%%tpu_train --no-progress\nimport torch_xla\n(torch.ones(2, device=device) * 3).sum().item()")
    assert "6.0" in text_of(first), text_of(first)
    check = kernel.run(
        "import tpu_nb.kernel.run.warm_imports as warm\n"
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


@pytest.mark.fresh_kernel
def test_the_cell_after_a_first_run_can_import_the_trainer_at_once(kernel: Kernel) -> None:
    """The warm imports run between cells: the next cell's imports never race them (which broke torch_xla's import)."""
    kernel.run("%load_ext tpu_nb\nimport torch", allow_errors=False)
    kernel.run("%%tpu_train --no-progress\n(torch.ones(2, device=device) * 3).sum().item()", allow_errors=False)
    imported = kernel.run("from transformers import Trainer\nimport torch_xla\nprint(torch_xla.runtime.__name__)")
    assert text_of(imported).strip() == "torch_xla.runtime", text_of(imported)
