from __future__ import annotations

import ast
import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from support.platforms import CPU_INSTALL, MakeSystem, codes

from tpu_nb.runtime import Accelerator, Platform, TpuInfo, Versions, detect

REPO = Path(__file__).resolve().parents[2]


# One test per platform snapshot.


def test_colab_v5e_1(make_system: MakeSystem) -> None:
    info = detect(make_system("colab_v5e_1"))

    assert info.platform is Platform.COLAB
    assert info.platform.label == "Google Colab"
    assert info.accelerator is Accelerator.TPU
    assert info.tpu == TpuInfo(
        generation="v5e",
        accelerator_type="v5litepod-1",
        chips=1,
        devices_per_chip=1,
        device_nodes=("/dev/vfio/0",),
    )
    assert (info.devices, info.workers, info.devices_per_worker) == (1, 1, 1)
    assert info.pjrt_device == "TPU"
    assert info.versions == Versions(
        python=platform.python_version(),
        torch="2.9.0+cpu",
        torch_xla="2.9.0",
        libtpu="0.0.21.1",
        transformers="5.15.0",
    )
    # The image's torch + torch_xla stay: tpu_nb alone is installed.
    assert info.install_command == "pip install tpu_nb"
    assert info.problems == ()
    assert info.can_launch


def test_colab_v2_8(make_system: MakeSystem) -> None:
    info = detect(make_system("colab_v2_8"))

    assert info.platform is Platform.COLAB
    assert info.accelerator is Accelerator.TPU
    assert info.tpu is not None
    # PCI id 0x0027 is shared by v2 and v3 and no accelerator type is set.
    assert info.tpu.generation == "v2/v3"
    assert info.tpu.accelerator_type is None
    assert (info.tpu.chips, info.tpu.devices_per_chip) == (4, 2)
    assert info.tpu.device_nodes == ("/dev/accel0", "/dev/accel1", "/dev/accel2", "/dev/accel3")
    # One worker per chip, two devices (TensorCores) in each.
    assert (info.devices, info.workers, info.devices_per_worker) == (8, 4, 2)
    assert info.pjrt_device == "TPU"
    assert info.versions.torch == "2.5.1+cpu"
    assert info.versions.torch_xla == "2.5.1"
    assert info.versions.libtpu == "0.1.dev20241010+nightly"  # from libtpu-nightly
    assert info.versions.transformers == "4.46.2"
    assert info.install_command == "pip install tpu_nb"
    assert info.problems == ()


def test_kaggle_v5e_8(make_system: MakeSystem) -> None:
    info = detect(make_system("kaggle_v5e_8"))

    assert info.platform is Platform.KAGGLE
    assert info.accelerator is Accelerator.TPU
    assert info.tpu == TpuInfo(
        generation="v5e",
        accelerator_type="v5litepod-8",
        chips=8,
        devices_per_chip=1,
        device_nodes=tuple(f"/dev/vfio/{index}" for index in range(8)),
    )
    assert (info.devices, info.workers, info.devices_per_worker) == (8, 8, 1)
    assert info.pjrt_device == "TPU"
    assert (info.versions.torch, info.versions.torch_xla, info.versions.libtpu) == ("2.8.0+cpu", "2.8.0", "0.0.17")
    assert info.versions.transformers == "5.24.0"
    assert info.install_command == "pip install tpu_nb"
    assert info.topology_vars == ("TPU_PROCESS_ADDRESSES",)
    assert codes(info) == ["topology_vars"]
    assert info.can_launch  # a warning only: tpu_nb removes the variables itself


def test_cloud_tpu_vm_v4_8(make_system: MakeSystem) -> None:
    info = detect(make_system("cloud_tpu_vm_v4_8"))

    assert info.platform is Platform.CLOUD_TPU_VM
    assert info.accelerator is Accelerator.TPU
    assert info.tpu is not None
    assert (info.tpu.generation, info.tpu.accelerator_type) == ("v4", "v4-8")
    # The Google gVNIC on the same vendor id is not a chip.
    assert (info.tpu.chips, info.tpu.devices_per_chip) == (4, 1)
    assert info.tpu.device_nodes == ("/dev/accel0", "/dev/accel1", "/dev/accel2", "/dev/accel3")
    assert (info.devices, info.workers, info.devices_per_worker) == (4, 4, 1)
    assert info.pjrt_device == "TPU"
    assert (info.versions.torch, info.versions.torch_xla, info.versions.libtpu) == ("2.9.0", "2.9.0", "0.0.21")
    assert info.install_command == "pip install tpu_nb"
    assert info.problems == ()


def test_gke_v5e_4(make_system: MakeSystem) -> None:
    info = detect(make_system("gke_v5e_4"))

    assert info.platform is Platform.GKE
    assert info.accelerator is Accelerator.TPU
    assert info.tpu is not None
    assert (info.tpu.generation, info.tpu.accelerator_type, info.tpu.chips) == ("v5e", "v5litepod-4", 4)
    # /dev/vfio/vfio is the VFIO container, not a chip.
    assert info.tpu.device_nodes == ("/dev/vfio/0", "/dev/vfio/1", "/dev/vfio/2", "/dev/vfio/3")
    assert (info.devices, info.workers, info.devices_per_worker) == (4, 4, 1)
    assert info.pjrt_device == "TPU"
    assert (info.versions.torch, info.versions.torch_xla, info.versions.libtpu) == ("2.9.0", "2.9.0", "0.0.21")
    assert info.install_command == "pip install tpu_nb"
    assert info.problems == ()


def test_gpu_machine(make_system: MakeSystem) -> None:
    info = detect(make_system("gpu_machine"))

    assert info.platform is Platform.LOCAL_JUPYTER
    assert info.accelerator is Accelerator.GPU
    assert info.tpu is None
    assert info.gpu_count == 1  # nvidiactl and nvidia-uvm are not GPUs
    assert info.pjrt_device == "CPU"
    assert (info.devices, info.workers, info.devices_per_worker) == (1, 1, 1)
    assert info.versions.torch == "2.9.0+cu128"
    assert info.versions.torch_xla is None
    assert info.versions.libtpu is None
    assert info.install_command == CPU_INSTALL
    assert codes(info) == ["torch_xla_missing", "no_tpu"]
    assert not info.can_launch


def test_cpu_laptop(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop"))

    assert info.platform is Platform.LOCAL_JUPYTER
    assert info.accelerator is Accelerator.CPU
    assert info.tpu is None
    assert info.gpu_count == 0  # integrated Intel graphics is a display device, not an NVIDIA GPU
    assert info.pjrt_device == "CPU"
    assert (info.devices, info.workers, info.devices_per_worker) == (1, 1, 1)
    assert (info.versions.torch, info.versions.torch_xla, info.versions.transformers) == ("2.9.0", "2.9.0", "5.0.0")
    assert info.install_command == "pip install tpu_nb"
    assert info.topology_vars == ()
    assert codes(info) == ["no_tpu"]
    assert info.errors == () and info.warnings == ()
    assert info.can_launch


# Platform and launch-plan details.


@pytest.mark.parametrize(
    ("accelerator_type", "generation"),
    [("v2-8", "v2"), ("v3-8", "v3"), ("v3-32", "v3"), ("something-else", "v2/v3")],
)
def test_accelerator_type_separates_v2_from_v3(make_system: MakeSystem, accelerator_type: str, generation: str) -> None:
    info = detect(make_system("colab_v2_8", environ={"TPU_ACCELERATOR_TYPE": accelerator_type}))

    assert info.tpu is not None
    assert info.tpu.generation == generation


def test_colab_is_recognised_by_its_environment_variable_alone(make_system: MakeSystem) -> None:
    system = make_system("cpu_laptop", environ={"COLAB_RELEASE_TAG": "release-colab_20250801"})

    assert detect(system).platform is Platform.COLAB


def test_tpu_variables_without_a_visible_tpu_mean_a_cloud_tpu_vm(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", environ={"TPU_WORKER_ID": "0"}))

    assert info.platform is Platform.CLOUD_TPU_VM
    assert info.accelerator is Accelerator.CPU


def test_kubernetes_without_a_tpu_is_not_gke(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", environ={"KUBERNETES_SERVICE_HOST": "10.96.0.1"}))

    assert info.platform is Platform.LOCAL_JUPYTER


def test_without_ipykernel_it_is_plain_python(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", modules={"ipykernel": None}))

    assert info.platform is Platform.PYTHON
    assert info.platform.label == "Python"


def test_drm_accel_directory_is_not_a_tpu_node(make_system: MakeSystem) -> None:
    # Linux's compute-accelerator subsystem puts other vendors' nodes in /dev/accel/.
    info = detect(make_system("cloud_tpu_vm_v4_8", files={"dev/accel/accel0": ""}))

    assert info.tpu is not None
    assert info.tpu.device_nodes == ("/dev/accel0", "/dev/accel1", "/dev/accel2", "/dev/accel3")


def test_nvidia_device_node_counts_as_gpu_when_pci_is_hidden(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", files={"dev/nvidia0": "", "dev/nvidia1": "", "dev/nvidiactl": ""}))

    assert info.accelerator is Accelerator.GPU
    assert info.gpu_count == 2


@pytest.mark.parametrize(("bounds", "workers"), [("1,2,1", 2), ("1,1,1", 1), ("2,2,2", 4), ("bogus", 4)])
def test_tpu_process_bounds_cap_workers_like_torch_xla(make_system: MakeSystem, bounds: str, workers: int) -> None:
    info = detect(make_system("gke_v5e_4", environ={"TPU_PROCESS_BOUNDS": bounds}))

    assert info.workers == workers
    assert info.devices == workers


def test_cpu_num_devices_sets_devices_in_the_single_cpu_worker(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", environ={"CPU_NUM_DEVICES": "4"}))

    assert (info.devices, info.workers, info.devices_per_worker) == (4, 1, 4)


@pytest.mark.parametrize("value", ["\u00b2", "four", ""])
def test_a_cpu_num_devices_that_is_not_a_number_counts_as_one(make_system: MakeSystem, value: str) -> None:
    # str.isdigit() takes "²", which int() refuses: detection raised ValueError (every magic runs it).
    info = detect(make_system("cpu_laptop", environ={"CPU_NUM_DEVICES": value}))

    assert (info.devices, info.workers) == (1, 1)


# The real machine and the cost of importing.


def test_detect_on_this_machine_is_cheap_and_leaves_torch_xla_unimported() -> None:
    script = (
        "import json, sys, time\n"
        "start = time.perf_counter()\n"
        "from tpu_nb.runtime import detect\n"
        "info = detect()  # defaults to SystemView.current()\n"
        "print(json.dumps({'seconds': time.perf_counter() - start,\n"
        "    'torch_xla_imported': 'torch_xla' in sys.modules,\n"
        "    'accelerator': info.accelerator.value, 'pjrt_device': info.pjrt_device,\n"
        "    'workers': info.workers, 'torch_xla': info.versions.torch_xla}))\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    result = json.loads(completed.stdout)
    print(f"import + detect() on this machine: {result['seconds']:.3f} s")

    assert result["torch_xla_imported"] is False
    assert result["accelerator"] == "cpu"
    assert result["pjrt_device"] == "CPU"
    assert result["workers"] == 1
    assert result["torch_xla"] == importlib.metadata.version("torch_xla")


def test_runtime_package_imports_only_the_standard_library() -> None:
    # Workers import tpu_nb; torch, IPython or widgets here would slow every one of them.
    package = REPO / "tpu_nb" / "runtime"
    imported: set[str] = set()
    for source in package.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # its own modules, and nothing else of tpu_nb (which imports the rest of the package)
                imported.add(node.module.split(".")[0] if not node.module.startswith("tpu_nb.runtime") else "tpu_nb.runtime")

    assert "importlib" in imported  # the walk really saw the imports
    assert "tpu_nb.runtime" in imported
    assert imported - sys.stdlib_module_names - {"__future__", "tpu_nb.runtime"} == set()


def test_label_names_platform_tpu_and_device(make_system: MakeSystem) -> None:
    assert detect(make_system("kaggle_v5e_8")).label == "Kaggle · TPU v5e × 8 · XLA:TPU"
    assert detect(make_system("cpu_laptop")).label == "Jupyter · CPU · XLA:CPU"
