"""The problem rules, through detection: when each appears, what it says, what it tells the user to do."""

from __future__ import annotations

import os
import types

import pytest
from support.platforms import CPU_INSTALL, FakeTorchXla, MakeSystem, codes, problem

from tpu_nb.runtime import detect

# Every problem code: when it appears, what it says, what it tells the user to do.


def test_torch_xla_missing_off_tpu(make_system: MakeSystem) -> None:
    info = detect(make_system("gpu_machine"))

    missing = problem(info, "torch_xla_missing")
    assert missing.severity == "error"
    assert "torch_xla is not installed" in missing.message
    assert missing.fix == CPU_INSTALL


def test_torch_xla_missing_on_tpu_installs_the_tpu_build_for_the_installed_torch(make_system: MakeSystem) -> None:
    info = detect(make_system("colab_v5e_1", packages={"torch_xla": None}))

    missing = problem(info, "torch_xla_missing")
    # The image's torch stays; only the matching torch_xla (with its libtpu) is added.
    assert missing.fix == "pip install 'torch_xla[tpu]~=2.9.0'"
    assert info.install_command == "pip install 'torch_xla[tpu]~=2.9.0' tpu_nb"
    # Without torch_xla, a missing libtpu is not the thing to report.
    assert "libtpu_missing" not in codes(info)


def test_torch_xla_missing_without_torch_installs_the_pinned_pair(make_system: MakeSystem) -> None:
    info = detect(make_system("colab_v5e_1", packages={"torch": None, "torch_xla": None}))

    assert problem(info, "torch_xla_missing").fix == "pip install torch==2.9.0 'torch_xla[tpu]==2.9.0'"


def test_version_mismatch_off_tpu(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", packages={"torch": "2.8.0"}))

    mismatch = problem(info, "version_mismatch")
    assert mismatch.severity == "error"
    assert "torch 2.8.0" in mismatch.message and "torch_xla 2.9.0" in mismatch.message
    assert mismatch.fix == CPU_INSTALL
    assert not info.can_launch


def test_version_mismatch_on_tpu_matches_torch_xla_to_torch(make_system: MakeSystem) -> None:
    info = detect(make_system("cloud_tpu_vm_v4_8", packages={"torch": "2.9.1+cpu", "torch_xla": "2.8.0"}))

    mismatch = problem(info, "version_mismatch")
    assert "torch 2.9.1+cpu" in mismatch.message and "torch_xla 2.8.0" in mismatch.message
    assert mismatch.fix == "pip install 'torch_xla[tpu]~=2.9.0'"


@pytest.mark.parametrize(("torch", "torch_xla"), [("2.9.0+cpu", "2.9.0"), ("2.5.1", "2.5.0"), ("2.9.0", "2.9.0+tpu")])
def test_same_major_minor_is_no_mismatch(make_system: MakeSystem, torch: str, torch_xla: str) -> None:
    info = detect(make_system("cpu_laptop", packages={"torch": torch, "torch_xla": torch_xla}))

    assert "version_mismatch" not in codes(info)


def test_runtime_initialized_in_this_process(make_system: MakeSystem, fake_torch_xla: FakeTorchXla) -> None:
    info = detect(make_system("cpu_laptop", modules={"torch_xla": fake_torch_xla(True)}))

    initialized = problem(info, "runtime_initialized")
    assert initialized.severity == "error"
    assert "XLA device was already used in this process" in initialized.message
    assert "can no longer start" in initialized.message
    assert "Restart the runtime (kernel)" in initialized.fix
    assert "inside %%tpu_train cells" in initialized.fix
    for call in ("TrainingArguments", "xm.xla_device()", "torch_xla.device()"):
        assert call in initialized.fix
    assert not info.can_launch


def test_imported_but_unused_torch_xla_is_fine(make_system: MakeSystem, fake_torch_xla: FakeTorchXla) -> None:
    info = detect(make_system("cpu_laptop", modules={"torch_xla": fake_torch_xla(False)}))

    assert "runtime_initialized" not in codes(info)


def test_a_half_imported_torch_xla_is_not_called(make_system: MakeSystem) -> None:
    # e.g. a module object still being initialised, without _XLAC yet
    info = detect(make_system("cpu_laptop", modules={"torch_xla": types.ModuleType("torch_xla")}))

    assert "runtime_initialized" not in codes(info)


def test_topology_vars(make_system: MakeSystem) -> None:
    info = detect(make_system("kaggle_v5e_8"))

    preset = problem(info, "topology_vars")
    assert preset.severity == "warning"
    assert "TPU_PROCESS_ADDRESSES" in preset.message
    assert '"Expected 8 worker addresses, got 1"' in preset.message
    assert "tpu_nb removes them for its workers" in preset.message
    assert preset.fix == "No action needed."


def test_topology_vars_names_only_what_is_set(make_system: MakeSystem) -> None:
    info = detect(make_system("kaggle_v5e_8", environ={"TPU_PROCESS_ADDRESSES": None, "CLOUD_TPU_TASK_ID": "0"}))

    assert info.topology_vars == ("CLOUD_TPU_TASK_ID",)
    assert "TPU_PROCESS_ADDRESSES" not in problem(info, "topology_vars").message


def test_tpu_busy(make_system: MakeSystem) -> None:
    system = make_system(
        "colab_v5e_1",
        files={
            "proc/4242/comm": "python3\n",
            "proc/4242/stat": stat(4242, parent=1, session=4000),
            "proc/4242/environ": KERNELS_CHILD,  # a worker of a kernel (session 4000) that is gone
        },
        links={"proc/4242/fd/0": "/dev/null", "proc/4242/fd/7": "/dev/vfio/0"},
    )
    info = detect(system)

    busy = problem(info, "tpu_busy")
    assert busy.severity == "error"
    assert f"pid 4242 (python3) has /dev/vfio/0 open, {STALE}" in busy.message
    assert "/dev/null" not in busy.message
    assert busy.fix == "Run %tpu_release to end pid 4242 (or: kill 4242), or restart the runtime."
    assert [holder.pid for holder in info.tpu_holders] == [4242]
    assert not info.can_launch


def test_tpu_busy_names_every_holder(make_system: MakeSystem) -> None:
    system = make_system(
        "colab_v2_8",
        files={
            "proc/77/comm": "tpu_worker\n",
            "proc/77/stat": stat(77, parent=1, session=4000),
            "proc/77/environ": KERNELS_CHILD,
            "proc/4242/stat": stat(4242, 1, 4000),
            "proc/4242/environ": KERNELS_CHILD,
        },
        links={"proc/77/fd/3": "/dev/accel2", "proc/77/fd/4": "/dev/accel3", "proc/4242/fd/9": "/dev/accel0"},
    )

    busy = problem(detect(system), "tpu_busy")
    assert "pid 77 (tpu_worker) has /dev/accel2, /dev/accel3 open" in busy.message
    assert "pid 4242 (unknown command) has /dev/accel0 open" in busy.message
    assert busy.fix == "Run %tpu_release to end pids 77 4242 (or: kill 77 4242), or restart the runtime."


KERNELS_CHILD = "HOME=/root\0JPY_PARENT_PID=12\0"
"""A process's environment when a notebook kernel started it: jupyter_client's JPY_PARENT_PID."""
STALE = "stale: the notebook kernel it was started from (session 4000) has exited (its environment holds the kernel's JPY_PARENT_PID)"


def status(parent: int, uid: int) -> str:
    return f"Name:\tpython3\nState:\tS (sleeping)\nPPid:\t{parent}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"


def stat(pid: int, parent: int, session: int) -> str:
    """/proc/<pid>/stat of a process in `session`, started 60 s after boot."""
    return f"{pid} (python3) S {parent} {pid} {session} " + "0 " * 15 + f"{60 * os.sysconf('SC_CLK_TCK')} 0 0\n"


def test_tpu_busy_says_what_only_another_user_this_kernel_or_a_restart_can_free(make_system: MakeSystem) -> None:
    me = os.getuid()
    system = make_system(
        "colab_v5e_1",  # the kernel is pid 100
        files={
            "proc/100/status": status(parent=50, uid=me),
            "proc/50/status": status(parent=1, uid=me),
            "proc/77/status": status(parent=1, uid=54321),  # no such user here
            "proc/110/status": status(parent=100, uid=me),
            "proc/120/status": status(parent=1, uid=me),
            "proc/stat": "btime 1764600000\n",
            "proc/100/stat": stat(100, parent=50, session=100),
            "proc/120/stat": stat(120, parent=1, session=4000),  # stale: its kernel is gone
            "proc/120/environ": KERNELS_CHILD,
            "proc/130/status": status(parent=1, uid=me),
            "proc/130/stat": stat(130, parent=1, session=100),  # live: `!nohup ... &` from this notebook
        },
        links={
            "proc/50/fd/3": "/dev/vfio/0",
            "proc/77/fd/3": "/dev/vfio/0",
            "proc/110/fd/3": "/dev/vfio/0",
            "proc/120/fd/3": "/dev/vfio/0",
            "proc/130/fd/3": "/dev/vfio/0",
        },
    )

    busy = problem(detect(system), "tpu_busy")

    assert "pid 110 (unknown command) has /dev/vfio/0 open, user " in busy.message
    assert busy.message.count("started by this kernel (child of the kernel)") == 1
    assert "pid 120 (unknown command) has /dev/vfio/0 open, running " in busy.message
    assert busy.message.count(STALE) == 1
    assert busy.message.count("live: started from this notebook") == 1
    assert "this kernel runs under it" in busy.message
    assert busy.fix == (
        "Run %tpu_release to end pid 120 (or: kill 120), or restart the runtime. "
        "pid 130 is live (started from this notebook): if it should stop, %tpu_release 130 ends it. "
        "pid 77 belongs to uid 54321: only they or root can end it (sudo kill 77). "
        "This kernel started pid 110: interrupt the cell running it, call .stop() or .kill() on a background run's handle, "
        "or kill 110. "
        "This kernel runs under pid 50: restart the runtime."
    )


def test_tpu_held_by_this_process_or_vfio_container_is_not_busy(make_system: MakeSystem) -> None:
    # Our own use is runtime_initialized's business; /dev/vfio/vfio is shared by design.
    system = make_system(
        "colab_v5e_1",
        files={"proc/4242/comm": "python3\n"},
        links={"proc/100/fd/7": "/dev/vfio/0", "proc/4242/fd/7": "/dev/vfio/vfio"},
    )

    assert "tpu_busy" not in codes(detect(system))


def test_libtpu_missing(make_system: MakeSystem) -> None:
    info = detect(make_system("cloud_tpu_vm_v4_8", packages={"libtpu": None}))

    missing = problem(info, "libtpu_missing")
    assert missing.severity == "error"
    assert "libtpu is not installed" in missing.message
    # The tpu extra of the installed torch_xla: libtpu comes, torch_xla stays.
    assert missing.fix == "pip install 'torch_xla[tpu]==2.9.0'"


@pytest.mark.parametrize(("torch_xla", "libtpu", "expected"), [("2.8.0", "0.0.21", "0.0.17"), ("2.9.0", "0.0.17", "0.0.21")])
def test_a_libtpu_other_than_torch_xlas_own_is_a_warning(make_system: MakeSystem, torch_xla: str, libtpu: str, expected: str) -> None:
    info = detect(make_system("kaggle_v5e_8", packages={"torch": torch_xla + "+cpu", "torch_xla": torch_xla, "libtpu": libtpu}))

    mismatch = problem(info, "libtpu_mismatch")
    assert mismatch.severity == "warning"
    assert f"libtpu {libtpu} is not the libtpu {expected} that torch_xla {torch_xla} was built for" in mismatch.message
    assert "PJRT API mismatch" in mismatch.message
    assert mismatch.fix == f"pip install libtpu=={expected}"
    assert info.can_launch


@pytest.mark.parametrize(("torch_xla", "libtpu"), [("2.8.0", "0.0.17"), ("2.9.0", "0.0.21.1"), ("2.7.0", "0.0.11")])
def test_libtpu_of_the_torch_xla_line_or_an_unknown_line_is_fine(make_system: MakeSystem, torch_xla: str, libtpu: str) -> None:
    info = detect(make_system("kaggle_v5e_8", packages={"torch": torch_xla, "torch_xla": torch_xla, "libtpu": libtpu}))

    assert "libtpu_mismatch" not in codes(info)


def test_libtpu_is_not_needed_off_tpu(make_system: MakeSystem) -> None:
    assert "libtpu_missing" not in codes(detect(make_system("cpu_laptop")))


def test_pjrt_cpu_on_tpu(make_system: MakeSystem) -> None:
    info = detect(make_system("gke_v5e_4", environ={"PJRT_DEVICE": "CPU"}))

    unused = problem(info, "pjrt_cpu_on_tpu")
    assert unused.severity == "warning"
    assert "PJRT_DEVICE is set to CPU" in unused.message
    assert "TPU v5e" in unused.message and "leave the TPU unused" in unused.message
    assert "PJRT_DEVICE=TPU" in unused.fix
    # The launch follows PJRT_DEVICE: one XLA:CPU worker.
    assert info.pjrt_device == "CPU"
    assert (info.devices, info.workers) == (1, 1)


def test_pjrt_tpu_set_explicitly_is_fine(make_system: MakeSystem) -> None:
    info = detect(make_system("gke_v5e_4", environ={"PJRT_DEVICE": "TPU"}))

    assert info.problems == ()
    assert info.workers == 4


def test_no_tpu(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop"))

    no_tpu = problem(info, "no_tpu")
    assert no_tpu.severity == "info"
    assert "one XLA:CPU worker" in no_tpu.message
    assert "slow for real training" in no_tpu.message
    assert "TPU runtime" in no_tpu.fix


def test_no_tpu_on_a_gpu_machine_says_the_gpu_is_unused(make_system: MakeSystem) -> None:
    no_tpu = problem(detect(make_system("gpu_machine")), "no_tpu")

    assert "1 NVIDIA GPU(s) found; tpu_nb does not use GPUs" in no_tpu.message


# TorchTPU (torch_tpu): an environment of torch 2.14 with torch-tpu and libtpu, on a v4-8 TPU VM.
TORCH_TPU_PACKAGES = {"torch": "2.14.1", "torch_xla": None, "torch-tpu": "0.2.0", "libtpu": "0.0.52"}


def test_torch_tpu_on_a_tpu_launches_a_process_per_chip_with_none_of_torch_xlas_problems(make_system: MakeSystem) -> None:
    info = detect(make_system("cloud_tpu_vm_v4_8", packages=TORCH_TPU_PACKAGES))

    assert info.stack.chosen == "torch_tpu" and info.can_launch and info.problems == ()
    assert (info.workers, info.devices_per_worker) == (4, 1)
    assert info.label.endswith("TPU v4 × 4 · TorchTPU")


def test_torch_tpu_without_a_tpu_is_refused_with_the_reason(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", packages=TORCH_TPU_PACKAGES))

    needs = problem(info, "torch_tpu_needs_tpu")
    assert needs.severity == "error" and "has no CPU mode" in needs.message and "tpu_nb[xla]" in needs.fix
    assert "no_tpu" not in codes(info) and "torch_xla_missing" not in codes(info)


def test_torch_tpu_with_the_wrong_torch_or_no_libtpu_names_what_is_missing(make_system: MakeSystem) -> None:
    old_torch = detect(make_system("cloud_tpu_vm_v4_8", packages={**TORCH_TPU_PACKAGES, "torch": "2.9.0"}))
    incomplete = problem(old_torch, "torch_tpu_incomplete")
    assert incomplete.message == "TorchTPU (torch_tpu) cannot run here: it needs torch 2.11 to 2.15, and torch 2.9.0 is installed."
    assert "environment of its own" in incomplete.fix
    no_libtpu = detect(make_system("cloud_tpu_vm_v4_8", packages={**TORCH_TPU_PACKAGES, "libtpu": None}))
    assert problem(no_libtpu, "torch_tpu_incomplete").fix == "pip install 'libtpu>=0.0.50'"


def test_torch_tpu_loaded_in_the_notebook_is_a_warning_and_a_tpu_used_there_blocks_the_launch(make_system: MakeSystem) -> None:
    imported = detect(
        make_system("cloud_tpu_vm_v4_8", packages=TORCH_TPU_PACKAGES, modules={"torch_tpu._loader": types.ModuleType("_loader")})
    )
    assert "torch_tpu_in_kernel" not in codes(imported)  # import torch imports it even without a TPU: nothing set up
    loader = types.ModuleType("_loader")
    loader._LOADED = True  # type: ignore[attr-defined]
    loaded = detect(make_system("cloud_tpu_vm_v4_8", packages=TORCH_TPU_PACKAGES, modules={"torch_tpu._loader": loader}))
    warning = problem(loaded, "torch_tpu_in_kernel")
    assert warning.severity == "warning" and loaded.can_launch
    assert "%load_ext tpu_nb before importing torch" in warning.fix and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in warning.fix

    backend = types.ModuleType("_device_ops_backend")
    backend._is_initialized = lambda: True  # type: ignore[attr-defined]
    modules = {"torch_tpu._loader": loader, "torch_tpu._internal.device._device_ops_backend": backend}
    used = detect(make_system("cloud_tpu_vm_v4_8", packages=TORCH_TPU_PACKAGES, modules=modules))
    error = problem(used, "torch_tpu_in_kernel")
    assert error.severity == "error" and not used.can_launch
    assert "cannot access or re-initialize TPU in a forked subprocess" in error.message and "Restart the runtime" in error.fix


def test_asking_for_torch_tpu_where_torch_xla_works_says_why_it_cannot(make_system: MakeSystem) -> None:
    info = detect(make_system("colab_v5e_1"), stack="torch_tpu")

    assert info.stack.why == "asked for with --stack"
    assert problem(info, "torch_tpu_incomplete").message.endswith("not installed (it needs torch 2.11 to 2.15).")
    assert "torch_xla_missing" not in codes(info) and "version_mismatch" not in codes(info)
