"""Starting a pod run: an export writes the run directory and prints the commands that start it."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output


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
