"""Work out which runtime a notebook is on and whether `%%tpu_train` can start there.

Pure logic on top of a SystemView: it never imports torch_xla, never starts
the XLA runtime and never touches the network (no GCE metadata query), so it
is safe to call in the kernel before a launch and cheap enough to call often.
"""

from __future__ import annotations

import platform as python_platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from .system import OpenedBy, PciDevice, SystemView, xla_runtime_started

# The newest torch_xla on PyPI; it is built against the torch of the same
# version. tpu_nb's `xla` extra pins this pair for machines without a TPU.
PINNED_TORCH_XLA = "2.9.0"

# The libtpu each torch_xla release line was built for (its `tpu` extra pins
# it). Kaggle pins 0.0.17 for torch_xla 2.8 because newer ones fail with a
# PJRT API mismatch; Colab ships 0.0.21.1 with torch_xla 2.9.
LIBTPU_FOR_TORCH_XLA: dict[tuple[str, ...], str] = {("2", "8"): "0.0.17", ("2", "9"): "0.0.21"}

# Variables some platforms preset for a single-process topology; with them a
# multi-process start fails ("Expected N worker addresses, got 1").
TOPOLOGY_VARIABLES = ("TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID")

GOOGLE_PCI_VENDOR = "0x1ae0"
NVIDIA_PCI_VENDOR = "0x10de"
DISPLAY_CONTROLLER_CLASS_PREFIX = "0x03"
TPU_GENERATION_BY_PCI_DEVICE = {
    "0x0027": "v2/v3",
    "0x005e": "v4",
    "0x0062": "v5p",
    "0x0063": "v5e",
    "0x006f": "v6e",
    "0x0076": "v7x",
}
# Only v2 and v3 expose two TensorCores per chip as separate XLA devices.
TWO_DEVICE_CHIP = "0x0027"
TPU_DEVICE_NODE = re.compile(r"/dev/(accel\d+|vfio/\d+)")
NVIDIA_GPU_NODE = re.compile(r"/dev/nvidia\d+")

Severity = Literal["error", "warning", "info"]

TORCH_XLA_MISSING = "torch_xla_missing"
VERSION_MISMATCH = "version_mismatch"
RUNTIME_INITIALIZED = "runtime_initialized"
TOPOLOGY_VARS = "topology_vars"
TPU_BUSY = "tpu_busy"
LIBTPU_MISSING = "libtpu_missing"
LIBTPU_MISMATCH = "libtpu_mismatch"
PJRT_CPU_ON_TPU = "pjrt_cpu_on_tpu"
NO_TPU = "no_tpu"


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
        return f"{self.platform.label} · {where} · XLA:{self.pjrt_device}"


@dataclass(frozen=True, slots=True)
class _LaunchPlan:
    devices_per_worker: int
    workers: int

    @property
    def devices(self) -> int:
        return self.devices_per_worker * self.workers


def detect(system: SystemView | None = None) -> RuntimeInfo:
    """Describe the runtime seen through `system` (default: this machine)."""
    system = SystemView.current() if system is None else system
    environ = system.environ
    pci_devices = system.pci_devices()
    tpu = _detect_tpu(system, pci_devices)
    gpu_count = _count_gpus(system, pci_devices)
    versions = _detect_versions(system)
    pjrt_device = (environ.get("PJRT_DEVICE") or ("TPU" if tpu else "CPU")).upper()
    plan = _plan_launch(environ, tpu, pjrt_device)
    xla_install = _xla_install(tpu, versions)
    topology_vars = tuple(name for name in TOPOLOGY_VARIABLES if name in environ)
    problems = (
        _runtime_initialized(system),
        _tpu_busy(system) if tpu else None,
        _torch_xla_missing(versions, xla_install),
        _version_mismatch(versions, xla_install),
        _libtpu_missing(tpu, versions),
        _libtpu_mismatch(tpu, versions),
        _pjrt_cpu_on_tpu(tpu, pjrt_device),
        _topology_vars(topology_vars, plan.workers),
        _no_tpu(tpu, gpu_count),
    )
    return RuntimeInfo(
        platform=_detect_platform(system, tpu),
        accelerator=Accelerator.TPU if tpu else Accelerator.GPU if gpu_count else Accelerator.CPU,
        tpu=tpu,
        gpu_count=gpu_count,
        pjrt_device=pjrt_device,
        devices=plan.devices,
        workers=plan.workers,
        devices_per_worker=plan.devices_per_worker,
        versions=versions,
        topology_vars=topology_vars,
        install_command=_install_command(tpu, versions, xla_install),
        problems=tuple(problem for problem in problems if problem),
    )


def _detect_tpu(system: SystemView, pci_devices: tuple[PciDevice, ...]) -> TpuInfo | None:
    chip_ids = [pci.device for pci in pci_devices if pci.vendor == GOOGLE_PCI_VENDOR and pci.device in TPU_GENERATION_BY_PCI_DEVICE]
    if not chip_ids:
        return None
    accelerator_type = system.environ.get("TPU_ACCELERATOR_TYPE") or None
    chip_id = chip_ids[0]
    return TpuInfo(
        generation=_tpu_generation(chip_id, accelerator_type),
        accelerator_type=accelerator_type,
        chips=len(chip_ids),
        devices_per_chip=2 if chip_id == TWO_DEVICE_CHIP else 1,
        device_nodes=tuple(
            node for node in system.device_nodes("accel*") + system.device_nodes("vfio/*") if TPU_DEVICE_NODE.fullmatch(node)
        ),
    )


def _tpu_generation(chip_id: str, accelerator_type: str | None) -> str:
    generation = TPU_GENERATION_BY_PCI_DEVICE[chip_id]
    # v2 and v3 share a PCI id; only the accelerator type ("v3-8") tells them apart.
    if chip_id == TWO_DEVICE_CHIP and accelerator_type:
        match = re.match(r"v([23])-", accelerator_type)
        if match:
            return "v" + match.group(1)
    return generation


def _count_gpus(system: SystemView, pci_devices: tuple[PciDevice, ...]) -> int:
    on_pci = sum(
        1 for pci in pci_devices if pci.vendor == NVIDIA_PCI_VENDOR and pci.device_class.startswith(DISPLAY_CONTROLLER_CLASS_PREFIX)
    )
    # Containers often hide PCI but pass the driver's device nodes through.
    nodes = [node for node in system.device_nodes("nvidia*") if NVIDIA_GPU_NODE.fullmatch(node)]
    return max(on_pci, len(nodes))


def _detect_versions(system: SystemView) -> Versions:
    version = system.package_version
    return Versions(
        python=python_platform.python_version(),
        torch=version("torch"),
        torch_xla=version("torch_xla"),
        libtpu=version("libtpu") or version("libtpu-nightly"),
        transformers=version("transformers"),
    )


def _detect_platform(system: SystemView, tpu: TpuInfo | None) -> Platform:
    environ, modules = system.environ, system.modules
    if "google.colab" in modules or "COLAB_RELEASE_TAG" in environ:
        return Platform.COLAB
    if "KAGGLE_KERNEL_RUN_TYPE" in environ or "KAGGLE_URL_BASE" in environ:
        return Platform.KAGGLE
    if tpu and "KUBERNETES_SERVICE_HOST" in environ:
        return Platform.GKE
    if tpu or "TPU_ACCELERATOR_TYPE" in environ or "TPU_WORKER_ID" in environ:
        return Platform.CLOUD_TPU_VM
    if "ipykernel" in modules:
        return Platform.LOCAL_JUPYTER
    return Platform.PYTHON


def _plan_launch(environ: Mapping[str, str], tpu: TpuInfo | None, pjrt_device: str) -> _LaunchPlan:
    if tpu and pjrt_device.upper() == "TPU":
        # Same rule as torch_xla's num_local_processes: one process per chip,
        # capped by TPU_PROCESS_BOUNDS when that is set.
        bounds = _process_bounds_size(environ.get("TPU_PROCESS_BOUNDS", ""))
        workers = min(tpu.chips, bounds) if bounds else tpu.chips
        return _LaunchPlan(devices_per_worker=tpu.devices_per_chip, workers=workers)
    # XLA:CPU: one process, CPU_NUM_DEVICES threads inside it.
    cpu_devices = environ.get("CPU_NUM_DEVICES", "")
    return _LaunchPlan(devices_per_worker=int(cpu_devices) if cpu_devices.isdigit() else 1, workers=1)


def _process_bounds_size(bounds: str) -> int | None:
    """The product of a "x,y,z" mesh, or None when unset or unparsable."""
    dims = bounds.split(",")
    if not all(dim.strip().isdigit() for dim in dims):
        return None
    size = 1
    for dim in dims:
        size *= int(dim)
    return size


def _has_matching_xla(versions: Versions) -> bool:
    return bool(versions.torch and versions.torch_xla and _major_minor(versions.torch) == _major_minor(versions.torch_xla))


def _xla_install(tpu: TpuInfo | None, versions: Versions) -> str:
    """The pip command that gives this runtime a torch_xla matching its torch."""
    if tpu is None:
        # XLA:CPU: tpu_nb's `xla` extra pins the pair that works off-TPU.
        return "pip install 'tpu_nb[xla]'"
    if versions.torch:
        # A TPU image's torch is kept (its other packages were built against
        # it); torch_xla releases only match torch's major.minor.
        line = ".".join(_major_minor(versions.torch))
        return f"pip install 'torch_xla[tpu]~={line}.0'"
    return f"pip install torch=={PINNED_TORCH_XLA} 'torch_xla[tpu]=={PINNED_TORCH_XLA}'"


def _install_command(tpu: TpuInfo | None, versions: Versions, xla_install: str) -> str:
    if _has_matching_xla(versions):
        return "pip install tpu_nb"  # Colab, Kaggle, Cloud TPU images: tpu_nb alone
    if tpu is None:
        return xla_install
    return f"{xla_install} tpu_nb"


def _release(version: str) -> str:
    """The public release without a local build tag: 2.5.1+cu121 -> 2.5.1."""
    return version.split("+", 1)[0]


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(_release(version).split(".")[:2])


def _runtime_initialized(system: SystemView) -> Problem | None:
    if not xla_runtime_started(system.modules):
        return None
    return Problem(
        RUNTIME_INITIALIZED,
        "error",
        "An XLA device was already used in this process, so %%tpu_train can no longer start "
        "its workers (torch_xla refuses with 'Runtime is already initialized').",
        "Restart the runtime (kernel), then keep all XLA device use inside %%tpu_train cells: "
        "in the notebook itself, do not create TrainingArguments or a Trainer, and do not call "
        "xm.xla_device() or torch_xla.device().",
    )


def _tpu_busy(system: SystemView) -> Problem | None:
    holders = system.opened_by_other_processes(lambda path: TPU_DEVICE_NODE.fullmatch(path) is not None)
    if not holders:
        return None
    return Problem(
        TPU_BUSY,
        "error",
        "The TPU is held by another process: " + "; ".join(map(_describe_holder, holders)) + ".",
        f"Stop it (kill {' '.join(str(holder.pid) for holder in holders)}) or restart the runtime.",
    )


def _describe_holder(holder: OpenedBy) -> str:
    return f"pid {holder.pid} ({holder.command or 'unknown command'}) has {', '.join(holder.paths)} open"


def _torch_xla_missing(versions: Versions, xla_install: str) -> Problem | None:
    if versions.torch_xla:
        return None
    return Problem(
        TORCH_XLA_MISSING,
        "error",
        "torch_xla is not installed; %%tpu_train needs it to run on XLA devices.",
        xla_install,
    )


def _version_mismatch(versions: Versions, xla_install: str) -> Problem | None:
    if not versions.torch or not versions.torch_xla or _has_matching_xla(versions):
        return None
    return Problem(
        VERSION_MISMATCH,
        "error",
        f"torch {versions.torch} does not match torch_xla {versions.torch_xla}: "
        "torch_xla only works with the torch release it was built against.",
        xla_install,
    )


def _libtpu_missing(tpu: TpuInfo | None, versions: Versions) -> Problem | None:
    if not tpu or not versions.torch_xla or versions.libtpu:
        return None
    return Problem(
        LIBTPU_MISSING,
        "error",
        "libtpu is not installed, so torch_xla cannot reach the TPU.",
        # The `tpu` extra of the installed torch_xla brings the libtpu it was built for.
        f"pip install 'torch_xla[tpu]=={_release(versions.torch_xla)}'",
    )


def _libtpu_mismatch(tpu: TpuInfo | None, versions: Versions) -> Problem | None:
    if not tpu or not versions.torch_xla or not versions.libtpu:
        return None
    expected = LIBTPU_FOR_TORCH_XLA.get(_major_minor(versions.torch_xla))
    if expected is None or _release(versions.libtpu).split(".")[:3] == expected.split("."):  # 0.0.21.1 is a 0.0.21
        return None
    return Problem(
        LIBTPU_MISMATCH,
        "warning",
        f"libtpu {versions.libtpu} is not the libtpu {expected} that torch_xla {versions.torch_xla} was built for: "
        "the TPU may fail to start with a PJRT API mismatch.",
        f"pip install libtpu=={expected}",
    )


def _pjrt_cpu_on_tpu(tpu: TpuInfo | None, pjrt_device: str) -> Problem | None:
    if not tpu or pjrt_device.upper() == "TPU":
        return None
    return Problem(
        PJRT_CPU_ON_TPU,
        "warning",
        f"PJRT_DEVICE is set to {pjrt_device} although a TPU {tpu.generation} is attached: "
        f"%%tpu_train would run on {pjrt_device} and leave the TPU unused.",
        "Set PJRT_DEVICE=TPU (%env PJRT_DEVICE=TPU) or remove it from the environment.",
    )


def _topology_vars(topology_vars: tuple[str, ...], workers: int) -> Problem | None:
    if not topology_vars:
        return None
    expected = workers if workers > 1 else "N"
    return Problem(
        TOPOLOGY_VARS,
        "warning",
        f"This environment presets {' and '.join(topology_vars)}, which break a multi-process "
        f'start ("Expected {expected} worker addresses, got 1"). tpu_nb removes them for its workers.',
        "No action needed.",
    )


def _no_tpu(tpu: TpuInfo | None, gpu_count: int) -> Problem | None:
    if tpu:
        return None
    gpus = f" ({gpu_count} NVIDIA GPU(s) found; tpu_nb does not use GPUs)" if gpu_count else ""
    return Problem(
        NO_TPU,
        "info",
        f"No TPU attached{gpus}: %%tpu_train runs on one XLA:CPU worker, useful for trying code but slow for real training.",
        "To train on a TPU, switch the notebook to a TPU runtime (Colab: Runtime > Change runtime type; Kaggle: Settings > Accelerator).",
    )
