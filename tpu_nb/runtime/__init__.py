"""Runtime detection for tpu_nb: which platform, which TPU, and what blocks a launch.

Stdlib only: workers import tpu_nb, so this must not pull in torch, torch_xla,
IPython or ipywidgets.
"""

from __future__ import annotations

from .detect import Accelerator, Platform, Problem, RuntimeInfo, TpuInfo, Versions, detect
from .panel import RuntimePanel
from .system import SystemView

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
