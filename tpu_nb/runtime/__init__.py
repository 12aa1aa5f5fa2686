"""Runtime detection for tpu_nb: which platform, which TPU, and what blocks a launch.

`system` reads the machine, `detect` probes it into `info`'s types,
`problems` judges them (one rule per problem), `versions` holds the version
and install policy, `tpu_software` which TPU stack `%%tpu_train` uses,
`peaks` each generation's peak compute, `device_holders` who holds the
TPU's device files, and `panel` shows it all. Stdlib only: workers import
tpu_nb, so this must not pull in torch, torch_xla, IPython or ipywidgets.
"""

from __future__ import annotations

from tpu_nb.runtime.detect import detect
from tpu_nb.runtime.info import Accelerator, Platform, Problem, RuntimeInfo, TpuInfo, Versions
from tpu_nb.runtime.panel import RuntimePanel
from tpu_nb.runtime.system import SystemView

__all__ = [
    "Accelerator",
    "Platform",
    "Problem",
    "RuntimeInfo",
    "RuntimePanel",
    "SystemView",
    "TpuInfo",
    "Versions",
    "detect",
]
