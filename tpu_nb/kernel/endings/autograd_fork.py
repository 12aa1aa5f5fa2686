"""A worker's backward() that fails because the notebook's own process ran autograd first.

PyTorch's autograd engine sizes its device threads once per process, at the
first backward(). One run in the kernel (a quick check of the model on the
CPU) counts no TPU devices, the forked workers inherit that, and their first
backward() on an XLA device fails an internal assertion. Nothing in the
kernel can undo it without patching torch there; a restart can.
"""

from __future__ import annotations

SIGNATURE = "device_ready_queues_"


def explain_autograd_fork(message: str) -> str | None:
    """What happened and the fix, for autograd's failed device-queue assertion; None for any other error."""
    if SIGNATURE not in message:
        return None
    return (
        "This notebook's own process ran backward() before (a check of the model on the CPU, or a Trainer run outside "
        "%%tpu_train), and PyTorch's autograd then cannot reach TPU devices in a forked worker. Fix: restart the kernel, "
        "and run backward() (or trainer.train()) only inside %%tpu_train or tpu_nb.launch()."
    )
