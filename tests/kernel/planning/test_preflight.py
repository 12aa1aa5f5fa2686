from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from support.platforms import MakeSystem

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.planning.preflight import check_can_launch
from tpu_nb.runtime import detect
from tpu_nb.wire.mesh import MeshShape


def test_a_ready_runtime_gets_its_worker_environment(make_system: MakeSystem) -> None:
    environment = check_can_launch(detect(make_system("cpu_laptop")), LaunchOptions(), running=None)
    assert environment.set["PJRT_DEVICE"] == "CPU"


def test_a_running_launch_is_named(make_system: MakeSystem) -> None:
    with pytest.raises(LaunchRefused, match="a %%tpu_train cell is still running in this kernel") as refused:
        check_can_launch(detect(make_system("cpu_laptop")), LaunchOptions(), running="a %%tpu_train cell")
    assert "interrupt its cell, or call .stop() or .kill()" in str(refused.value)


def test_missing_torch_xla_gives_the_install_command(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", packages={"torch_xla": None}))
    with pytest.raises(LaunchRefused) as refused:
        check_can_launch(info, LaunchOptions(), running=None)
    assert "Fix: pip install 'tpu_nb[xla]'" in str(refused.value)


def test_mismatched_versions_are_refused(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", packages={"torch": "2.8.0"}))
    with pytest.raises(LaunchRefused, match="2.8.0"):
        check_can_launch(info, LaunchOptions(), running=None)


def test_every_problem_is_listed_at_once(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", packages={"torch_xla": None}))
    with pytest.raises(LaunchRefused) as refused:
        check_can_launch(info, LaunchOptions(cores=0, timeout=0), running="tpu_nb.launch(train)")
    lines = [line for line in str(refused.value).splitlines() if line.startswith("- ")]
    assert len(lines) == 4


def test_runtime_initialised_in_this_process_is_refused_for_real() -> None:
    """An XLA tensor made in the 'kernel' itself: the launch must refuse, not fork."""
    script = textwrap.dedent(
        """
        import os, torch, torch_xla
        os.environ["PJRT_DEVICE"] = "CPU"
        torch.ones(1, device=torch_xla.device()) + 1
        import tpu_nb
        from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
        try:
            tpu_nb.launch(print, "never")
        except LaunchRefused as error:
            print("REFUSED", error)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "REFUSED" in done.stdout, done.stderr
    assert "restart" in done.stdout.lower()
    assert "never" not in done.stdout.replace("tpu_nb.launch", "")


def test_a_mesh_that_does_not_cover_the_devices_is_refused(make_system: MakeSystem) -> None:
    options = LaunchOptions(cores=4, spmd=True, mesh=MeshShape.parse("fsdp=4,tensor=2"))
    with pytest.raises(LaunchRefused) as refused:
        check_can_launch(detect(make_system("cpu_laptop")), options, running=None)
    assert (
        "--mesh fsdp=4,tensor=2 covers 8 devices, but this run has 4: choose axis sizes that multiply to 4, or --cores 8 (XLA:CPU)."
        in str(refused.value)
    )


def test_an_spmd_run_gets_its_devices_and_quiet_xla_warnings(make_system: MakeSystem, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    environment = check_can_launch(detect(make_system("cpu_laptop")), LaunchOptions(cores=4, spmd=True), running=None)
    assert environment.devices == 4
    assert environment.set["CPU_NUM_DEVICES"] == "4" and environment.set["TF_CPP_MIN_LOG_LEVEL"] == "2"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")  # what torch_xla sets when imported: raised too
    assert check_can_launch(detect(make_system("cpu_laptop")), LaunchOptions(spmd=True), running=None).set["TF_CPP_MIN_LOG_LEVEL"] == "2"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # more logging: the user's own choice is kept
    assert "TF_CPP_MIN_LOG_LEVEL" not in check_can_launch(detect(make_system("cpu_laptop")), LaunchOptions(spmd=True), running=None).set


def test_spmd_on_a_tpu_host_uses_every_core(make_system: MakeSystem) -> None:
    with pytest.raises(LaunchRefused, match="--cores 4: an SPMD run drives every TPU core of the host; leave --cores out."):
        check_can_launch(detect(make_system("kaggle_v5e_8")), LaunchOptions(cores=4, spmd=True), running=None)
    assert check_can_launch(detect(make_system("kaggle_v5e_8")), LaunchOptions(spmd=True), running=None).devices == 8


def test_a_mode_is_for_torch_tpu_and_torch_tpu_takes_its_chips_count(make_system: MakeSystem) -> None:
    with pytest.raises(LaunchRefused, match="--mode fused is for TorchTPU runs"):
        check_can_launch(detect(make_system("cpu_laptop")), LaunchOptions(mode="fused"), running=None)
    torch_tpu = detect(
        make_system("cloud_tpu_vm_v4_8", packages={"torch": "2.14.1", "torch_xla": None, "torch-tpu": "0.2.0", "libtpu": "0.0.52"})
    )
    assert check_can_launch(torch_tpu, LaunchOptions(), running=None).devices == 4
    assert check_can_launch(torch_tpu, LaunchOptions(cores=1), running=None).devices == 1
    with pytest.raises(LaunchRefused, match="--cores 3: TorchTPU runs 1, 2, 4, 8 processes on a TPU v4 host"):
        check_can_launch(torch_tpu, LaunchOptions(cores=3), running=None)
    with pytest.raises(LaunchRefused, match="--cores 8: this host has 4 TPU chips"):
        check_can_launch(torch_tpu, LaunchOptions(cores=8), running=None)


def test_torch_tpu_without_a_tpu_is_refused_with_the_reason(make_system: MakeSystem) -> None:
    info = detect(make_system("cpu_laptop", packages={"torch": "2.14.1", "torch_xla": None, "torch-tpu": "0.2.0", "libtpu": "0.0.52"}))
    with pytest.raises(LaunchRefused, match="TorchTPU \\(torch_tpu\\) has no CPU mode") as refused:
        check_can_launch(info, LaunchOptions(), running=None)
    assert "tpu_nb[xla]" in str(refused.value)
