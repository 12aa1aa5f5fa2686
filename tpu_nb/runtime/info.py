"""What runtime detection finds: the platform, the TPU, versions, and the problems with their fixes (types only)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from tpu_nb.runtime.device_holders import DeviceHolder

Severity = Literal["error", "warning", "info"]


class Platform(str, Enum):
    """Where the notebook runs."""

    COLAB = "colab"
    KAGGLE = "kaggle"
    CLOUD_TPU_VM = "cloud_tpu_vm"
    GKE = "gke"
    LOCAL_JUPYTER = "local_jupyter"
    PYTHON = "python"

    @property
    def label(self) -> str:
        return _PLATFORM_LABELS[self]


_PLATFORM_LABELS = {
    Platform.COLAB: "Google Colab",
    Platform.KAGGLE: "Kaggle",
    Platform.CLOUD_TPU_VM: "Cloud TPU VM",
    Platform.GKE: "Google Kubernetes Engine",
    Platform.LOCAL_JUPYTER: "Jupyter",
    Platform.PYTHON: "Python",
}


class Accelerator(str, Enum):
    """The kind of accelerator attached to this machine."""

    TPU = "tpu"
    GPU = "gpu"
    CPU = "cpu"


@dataclass(frozen=True, slots=True)
class TpuInfo:
    """The TPU chips attached to this host."""

    generation: str
    accelerator_type: str | None
    chips: int
    devices_per_chip: int
    device_nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Versions:
    """Installed versions of the stack, None where a package is missing."""

    python: str
    torch: str | None
    torch_xla: str | None
    libtpu: str | None
    transformers: str | None
    torch_tpu: str | None = None  # TorchTPU, PyTorch/XLA's successor


StackName = Literal["torch_xla", "torch_tpu"]
STACK_NAMES: tuple[StackName, ...] = ("torch_xla", "torch_tpu")


@dataclass(frozen=True, slots=True)
class StackStatus:
    """One stack: its version, and what keeps it from working with this environment's torch (None: nothing), with the fix."""

    name: StackName
    version: str | None
    missing: str | None
    fix: str | None = None

    @property
    def works(self) -> bool:
        return self.missing is None

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}" if self.version else self.name


@dataclass(frozen=True, slots=True)
class StackChoice:
    """Which stack `%%tpu_train` uses and why, beside every stack's status."""

    chosen: StackName
    why: str
    stacks: tuple[StackStatus, ...]

    def status(self, name: StackName) -> StackStatus:
        return next(stack for stack in self.stacks if stack.name == name)

    @property
    def used(self) -> StackStatus:
        return self.status(self.chosen)


@dataclass(frozen=True, slots=True)
class Problem:
    """Something that stops or degrades `%%tpu_train`, with what to do about it."""

    code: str
    severity: Severity
    message: str
    fix: str


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """Everything `%tpu_info` shows and `%%tpu_train` needs to plan a launch."""

    platform: Platform
    accelerator: Accelerator
    tpu: TpuInfo | None
    gpu_count: int
    pjrt_device: str
    devices: int
    workers: int
    devices_per_worker: int
    versions: Versions
    topology_vars: tuple[str, ...]
    install_command: str
    """How to install tpu_nb here, installing nothing the runtime already has that works."""
    problems: tuple[Problem, ...]
    stack: StackChoice
    """The TPU stack `%%tpu_train` uses (torch_xla or torch_tpu), why, and what each stack lacks."""
    started_at: float | None = None
    """When this machine or container started (Unix time): a hosted session's clock starts with it."""
    tpu_holders: tuple[DeviceHolder, ...] = ()
    """Other processes holding the TPU's device files (what `%tpu_release` may end)."""

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(problem for problem in self.problems if problem.severity == "error")

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(problem for problem in self.problems if problem.severity == "warning")

    @property
    def can_launch(self) -> bool:
        return not self.errors

    @property
    def label(self) -> str:
        """One line for status displays, e.g. "Kaggle · TPU v5e × 8 · XLA:TPU"."""
        where = f"TPU {self.tpu.generation} × {self.tpu.chips}" if self.tpu else self.accelerator.value.upper()
        runs_on = "TorchTPU" if self.stack.chosen == "torch_tpu" else f"XLA:{self.pjrt_device}"
        return f"{self.platform.label} · {where} · {runs_on}"
