"""Choosing a pod backend and checking the hosts' versions, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tpu_nb.kernel.errors import LaunchRefused
from tpu_nb.kernel.pod.launching import version_problems
from tpu_nb.kernel.pod.tpu_vm import HostVersions

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


def test_export_writes_the_jobset_and_prints_the_commands(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with capture_output() as captured:
        result = ip.run_cell("%%tpu_train --pod tiny --backend export --accelerator v5litepod-16 --image example.com/xla:2.9\n1")
    assert result.success, result.error_in_exec
    [run_dir] = (tmp_path / "tpu_nb_pod_runs").iterdir()
    assert (run_dir / "jobset.yaml").exists() and (run_dir / "train.py").exists()
    assert f"kubectl --namespace=default apply -f {run_dir}/jobset.yaml" in captured.stdout
    assert "gcloud compute tpus tpu-vm ssh tiny --worker=all" in captured.stdout
    assert "exec python3 train.py" in captured.stdout


def test_a_local_build_tag_is_the_same_release() -> None:
    hosts = [HostVersions("w-0", "2.9.0", "2.9.0")]
    assert version_problems({"torch": "2.9.0+cpu", "torch_xla": "2.9.0"}, hosts, 1) == []  # Colab's torch, PyPI's on the hosts


def test_results_of_a_run_that_saved_none_say_what_to_check(tmp_path: Path) -> None:
    import tpu_nb

    with pytest.raises(FileNotFoundError, match="holds no results of rank 0 .results/result-0.json.: has the run ended"):
        tpu_nb.pod.results(tmp_path)


def test_a_function_without_source_is_refused() -> None:
    import tpu_nb

    with pytest.raises(LaunchRefused, match="its source cannot be read .* pass the code as a string"):
        tpu_nb.pod.launch(print, "my-slice", backend="export")


def test_results_from_a_place_others_can_write_load_their_weights_only(tmp_path: Path) -> None:
    import torch

    import tpu_nb
    from tpu_nb.wire.results import ModuleWeights, NotTransferable, RankResult, ResultPlaces, save_result

    (tmp_path / "results").mkdir()
    model = torch.nn.Linear(2, 2)
    save_result(RankResult("a pickled value", True, {"model": ModuleWeights(model.state_dict())}), ResultPlaces(tmp_path / "results"), 0)
    trusted = tpu_nb.pod.results(tmp_path)
    assert trusted.value == "a pickled value" and torch.equal(trusted.returned["model"]["weight"], model.weight)
    careful = tpu_nb.pod.results(tmp_path, weights_only=True)
    assert isinstance(careful.value, NotTransferable) and torch.equal(careful.returned["model"]["weight"], model.weight)
