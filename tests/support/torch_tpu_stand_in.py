"""TorchTPU stood in for by a CPU device and gloo, for tests only (not part of the package).

No TPU exists here and torch_tpu has no CPU mode, so the whole path around
the device is tested with a stand-in `ChipStack`: each rank is a process of
its own, given its rank's environment, joining a gloo process group (where a
TPU's ranks join "tpu_dist") and computing on the CPU (where they would use
`tpu:0`). Detection is faked as a v4-8 TPU VM with torch 2.14.1, torch-tpu
0.2.0 and libtpu 0.0.52, so `%%tpu_train` and `tpu_nb.launch` choose TorchTPU.

What differs from a TPU: no torch_tpu is loaded, so the execution mode is
only recorded (in TPU_NB_STAND_IN_MODE, for the tests to see); a copy to
the host is done at once, and `StandInEvent` says so only on its second
query (so a report waits for its copy at least once); the ranks share this
machine's two cores; compile counts are zero (the stand-in compiles nothing).
"""

from __future__ import annotations

import os

import pytest
from support.platforms import MakeSystem

from tpu_nb.kernel.run import local_run
from tpu_nb.kernel.trials import sweep_start
from tpu_nb.runtime import RuntimeInfo, detect
from tpu_nb.workers.processes import chip_ranks
from tpu_nb.workers.processes.chip_ranks import ChipStack
from tpu_nb.workers.readings.device_readings import CompileReading

TORCH_TPU_PACKAGES = {"torch": "2.14.1", "torch_xla": None, "torch-tpu": "0.2.0", "libtpu": "0.0.52"}
MODE_SEEN = "TPU_NB_STAND_IN_MODE"


class StandInEvent:
    """An event that is done on its second query: a report's copy is waited for once."""

    def __init__(self) -> None:
        self.queries = 0
        self.recorded = False

    def record(self) -> None:
        self.recorded = True

    def query(self) -> bool:
        self.queries += 1
        return self.recorded and self.queries > 1


def _record_mode(mode: str) -> None:
    os.environ[MODE_SEEN] = mode


def _load_nothing() -> None:
    """The stand-in's device and process group (cpu, gloo) are torch's own: nothing to load."""


STAND_IN = ChipStack(_load_nothing, "cpu", "gloo", _record_mode, StandInEvent, lambda: CompileReading(0, 0.0, 0, 0))


def install(monkeypatch: pytest.MonkeyPatch, make_system: MakeSystem) -> RuntimeInfo:
    """From now on (in this test), launches see a 4-chip TPU host with TorchTPU and run their ranks on the stand-in.

    An environment with torch_tpu has no torch_xla: accelerate and transformers
    are told so too (they would otherwise put a Trainer on XLA). Call
    `forget_torch_xla_checks` when the test ends.
    """
    info = detect(make_system("cloud_tpu_vm_v4_8", packages=TORCH_TPU_PACKAGES))

    def host(stack: str | None = None) -> RuntimeInfo:
        return detect(make_system("cloud_tpu_vm_v4_8", packages=TORCH_TPU_PACKAGES), stack)

    monkeypatch.setattr(local_run, "detect", host)
    monkeypatch.setattr(sweep_start, "detect", host)  # a sweep plans its worlds on the same host
    monkeypatch.setattr(chip_ranks, "TORCH_TPU", STAND_IN)
    monkeypatch.setattr(local_run, "tpu_info_installed", lambda: False)  # no libtpu metrics here to read the chips' figures from
    # Imported first, as they are: modules that import torch_xla at import time when it is there must keep it,
    # for the tests that come after this one in the same process.
    import accelerate.accelerator
    import accelerate.utils.imports
    import transformers.trainer
    import transformers.utils.import_utils

    monkeypatch.setattr(accelerate.utils.imports, "_torch_xla_available", False)
    monkeypatch.setattr(transformers.utils.import_utils, "USE_TORCH_XLA", "0")
    forget_torch_xla_checks()
    return info


def forget_torch_xla_checks() -> None:
    """Clear what accelerate and transformers remember of whether torch_xla is there."""
    import accelerate.utils.imports
    import transformers.utils.import_utils

    accelerate.utils.imports.is_torch_xla_available.cache_clear()
    transformers.utils.import_utils.is_torch_xla_available.cache_clear()
