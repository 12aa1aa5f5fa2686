"""Before a pod run starts: the backend chosen, the hosts' versions checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.pod.backends.tpu_vm import HostVersions
from tpu_nb.kernel.pod.slice_checks import version_problems

NOTEBOOK = {"torch": "2.9.0", "torch_xla": "2.9.0"}


def test_hosts_with_the_notebooks_versions_pass() -> None:
    hosts = [HostVersions(f"w-{n}", "2.9.0", "2.9.0") for n in range(4)]
    assert version_problems(NOTEBOOK, hosts, 4) == []


def test_a_host_with_other_versions_or_a_silent_host_is_named_with_the_fix() -> None:
    hosts = [HostVersions("w-0", "2.9.0", "2.9.0"), HostVersions("w-1", "2.8.0", "2.9.0")]
    [silent, torch] = version_problems(NOTEBOOK, hosts, 4)
    assert silent.startswith("2 of the slice's 4 hosts answered")
    assert "torch 2.9.0 in the notebook, but 2.8.0 on w-1" in torch and "pip install torch==2.9.0" in torch


def test_without_torch_xla_in_the_notebook_the_hosts_must_still_agree() -> None:
    hosts = [HostVersions("w-0", "2.9.0", "2.9.0"), HostVersions("w-1", "2.9.0", "2.8.0")]
    [problem] = version_problems({"torch": "2.9.0", "torch_xla": None}, hosts, 2)
    assert "the hosts differ in torch_xla (2.8.0, 2.9.0)" in problem


def test_without_gcloud_or_an_image_the_user_is_told_the_three_ways(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no gcloud, no kubectl
    with capture_output():
        result = ip.run_cell("%%tpu_train --pod my-slice\n1")
    assert isinstance(result.error_in_exec, LaunchRefused)
    message = str(result.error_in_exec)
    assert "gcloud is not installed here" in message and "--image" in message and "--backend export" in message


def test_a_local_build_tag_is_the_same_release() -> None:
    hosts = [HostVersions("w-0", "2.9.0", "2.9.0")]
    assert version_problems({"torch": "2.9.0+cpu", "torch_xla": "2.9.0"}, hosts, 1) == []  # Colab's torch, PyPI's on the hosts


def test_a_pod_run_on_torch_tpu_is_refused_before_anything_is_asked_of_the_cloud(ip: InteractiveShell) -> None:
    with capture_output():
        result = ip.run_cell("%%tpu_train --pod my-slice --backend export --stack torch_tpu\n1")
    assert isinstance(result.error_in_exec, LaunchRefused)
    assert "pod runs use torch_xla on every host; TorchTPU runs on this machine's chips only for now" in str(result.error_in_exec)
