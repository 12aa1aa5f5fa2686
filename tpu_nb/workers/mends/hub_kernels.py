"""Hugging Face's hub kernels kept away from XLA devices, in a torch_xla worker.

transformers 5.25 kernelizes every model `from_pretrained` loads
(`use_kernels` defaults to on when the `kernels` package, now one of its
requirements, is installed) and kernelizes again for the model's device at
each `model.train()`/`model.eval()`. `kernels` knows no "xla" device, so the
first `model.train()` on an XLA device raises "Unsupported device type 'xla'":
every fine-tuning cell would fail. Hub kernels are CUDA/ROCm/Metal/NPU code
that XLA could not run anyway, so in a torch_xla worker (only there: the
notebook's transformers is left as it is) they are off:
- models loaded in the cell: `USE_HUB_KERNELS=NO`, transformers' own switch;
- models the notebook loaded (kernelized for the CPU there): transformers'
  check that `kernels` is usable answers no for this process, so moving
  between train and eval kernelizes nothing. A layer the notebook had
  replaced by a kernel from the hub for the CPU keeps it; none is in
  transformers' own mapping for the CPU.
"""

from __future__ import annotations

import os
import sys

HUB_KERNELS_SWITCH = "USE_HUB_KERNELS"


def keep_hub_kernels_off_xla() -> None:
    """In this worker process: no hub kernels for models loaded here, no re-kernelizing for those loaded before the fork."""
    os.environ[HUB_KERNELS_SWITCH] = "NO"
    modeling_utils = sys.modules.get("transformers.modeling_utils")
    if modeling_utils is not None and hasattr(modeling_utils, "is_kernels_available"):
        setattr(modeling_utils, "is_kernels_available", _kernels_unusable)  # noqa: B010 - a module's global, set in this worker


def _kernels_unusable() -> bool:
    return False
