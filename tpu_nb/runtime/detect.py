"""Work out which runtime a notebook is on: probe the machine through a SystemView, judge it with the problem rules.

It never imports torch_xla or torch_tpu, never starts a TPU runtime and never touches
the network (no GCE metadata query), so it is safe to call in the kernel
before a launch and cheap enough to call often.
"""

from __future__ import annotations

import platform as python_platform
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tpu_nb.runtime.device_holders import is_tpu_device, tpu_device_holders
from tpu_nb.runtime.info import Accelerator, Platform, RuntimeInfo, StackName, TpuInfo, Versions
from tpu_nb.runtime.problems import Detected, problems_of
from tpu_nb.runtime.system import PciDevice, SystemView
from tpu_nb.runtime.tpu_software import choose_stack
from tpu_nb.runtime.versions import install_command, xla_install

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
NVIDIA_GPU_NODE = re.compile(r"/dev/nvidia\d+")


@dataclass(frozen=True, slots=True)
class _LaunchPlan:
    devices_per_worker: int
    workers: int

    @property
    def devices(self) -> int:
        return self.devices_per_worker * self.workers


def detect(system: SystemView | None = None, stack: StackName | None = None) -> RuntimeInfo:
    """Describe the runtime seen through `system` (default: this machine); `stack`: the TPU stack asked for (`--stack`)."""
    system = SystemView.current() if system is None else system
    environ = system.environ
    pci_devices = system.pci_devices()
    tpu = _detect_tpu(system, pci_devices)
    gpu_count = _count_gpus(system, pci_devices)
    versions = _detect_versions(system)
    pjrt_device = (environ.get("PJRT_DEVICE") or ("TPU" if tpu else "CPU")).upper()
    plan = _plan_launch(environ, tpu, pjrt_device)
    topology_vars = tuple(name for name in TOPOLOGY_VARIABLES if name in environ)
    # Reading every process's descriptors costs a scan of /proc: only worth it when there is a TPU to hold.
    holders = tpu_device_holders(system) if tpu else ()
    choice = choose_stack(versions, stack)
    if choice.chosen == "torch_tpu":
        plan = _LaunchPlan(devices_per_worker=1, workers=tpu.chips if tpu else 0)  # a process per chip; no CPU mode
    found = Detected(
        system, tpu, gpu_count, versions, pjrt_device, plan.workers, topology_vars, xla_install(tpu, versions), holders, choice
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
        install_command="pip install tpu_nb" if choice.chosen == "torch_tpu" else install_command(tpu, versions),
        problems=problems_of(found),
        stack=choice,
        started_at=system.started_at(),
        tpu_holders=holders,
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
        device_nodes=tuple(node for node in system.device_nodes("accel*") + system.device_nodes("vfio/*") if is_tpu_device(node)),
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
        torch_tpu=version("torch-tpu"),
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
    return _LaunchPlan(devices_per_worker=int(cpu_devices) if cpu_devices.isdecimal() else 1, workers=1)


def _process_bounds_size(bounds: str) -> int | None:
    """The product of a "x,y,z" mesh, or None when unset or unparsable."""
    dims = bounds.split(",")
    if not all(dim.strip().isdecimal() for dim in dims):
        return None
    size = 1
    for dim in dims:
        size *= int(dim)
    return size
