"""A pod run's directory: the exported train.py runs here with plain `python train.py`, like %%tpu_train."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tpu_nb.kernel.pod.backends.gke import archive
from tpu_nb.kernel.pod.program import PodProgram, train_script, write_run_directory
from tpu_nb.wire.events import Progress, WorkerStarted
from tpu_nb.wire.host_lines import HostEnded, decode
from tpu_nb.wire.results import ModuleWeights, load_result
from tpu_nb.wire.run_directory import Cell

PREPARE = """%%tpu_prepare
import torch
from transformers import BertConfig, BertForSequenceClassification
torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=16, num_labels=2)
model = BertForSequenceClassification(config)
input_ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(1))
labels = torch.arange(8) % 2
"""

TRAIN = """
import torch_xla
model.to(device).train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for step in range(6):
    loss = model(input_ids=input_ids.to(device), labels=labels.to(device)).loss
    loss.backward(); optimizer.step(); optimizer.zero_grad(); torch_xla.sync()
    report(step=step, loss=loss)
round(float(loss), 5)
"""


def run_cell(shell: InteractiveShell, cell: str):  # type: ignore[no-untyped-def]
    with capture_output() as captured:
        result = shell.run_cell(cell)
    assert result.success, f"{result.error_in_exec}\n{captured.stderr}"
    return result


def test_the_exported_train_py_gives_the_same_result_as_tpu_train(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_cell(ip, PREPARE)
    local = run_cell(ip, "%%tpu_train --no-progress --return model" + TRAIN).result
    trained_here = {name: tensor.clone() for name, tensor in ip.user_ns["model"].state_dict().items()}
    run_cell(ip, PREPARE)  # a fresh model; the same cell run again replaces its recording
    run_cell(ip, "%%tpu_train --pod my-slice --backend export --run-dir runs --return model" + TRAIN)
    [run_dir] = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["notebook"]["packages"]["torch"] == torch.__version__.split("+")[0] or manifest["notebook"]["packages"]["torch"]
    assert manifest["run"]["return_names"] == ["model"] and manifest["run"]["hosts"] == 1

    done = subprocess.run(
        [sys.executable, "train.py"], cwd=run_dir, env={**os.environ, "PJRT_DEVICE": "CPU"}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    events = [line.event for line in map(decode, done.stdout.splitlines()) if line.event is not None]
    assert any(isinstance(event, WorkerStarted) for event in events)
    assert [event.step for event in events if isinstance(event, Progress)][-1] == 5
    assert events[-1] == HostEnded("done")
    exported = load_result(run_dir / "results", 0)
    assert exported is not None and exported.value == local
    weights = exported.returned["model"]
    assert isinstance(weights, ModuleWeights)
    assert weights.state_dict.keys() == trained_here.keys()
    for name, tensor in trained_here.items():
        torch.testing.assert_close(weights.state_dict[name], tensor, msg=name)


def test_train_py_keeps_any_cell_source_exactly(tmp_path: Path) -> None:
    tricky = "text = '''quoted'''\npath = 'C:\\\\dir\\\\'\nprint(text, path)"
    program = PodProgram((Cell("In [1]", "%%tpu_prepare", tricky),), Cell("In [2]", "%%tpu_train --pod x", "x = 1\n\n"))
    namespace: dict[str, object] = {}
    exec(compile(train_script(program, "run").replace('if __name__ == "__main__":', "if False:"), "train.py", "exec"), namespace)
    assert namespace["PREPARED"] == [program.prepared[0]]
    assert namespace["TRAIN"] == program.train


def test_the_archive_holds_the_run_without_its_results(tmp_path: Path) -> None:
    import io
    import tarfile

    program = PodProgram((), Cell("In [1]", "%%tpu_train --pod x", "1"))
    run = write_run_directory(program, tmp_path / "run", "run", hosts=2, devices=8)
    (run.path / "results").mkdir()
    (run.path / "results" / "result-0.json").write_text("old")
    names = tarfile.open(fileobj=io.BytesIO(archive(run))).getnames()
    assert "./train.py" in names and "./manifest.json" in names and "./tpu_nb/workers/processes/pod_host.py" in names
    assert not any(name.startswith("./results") or "__pycache__" in name for name in names)


def test_an_spmd_train_py_drives_every_device_of_its_host_through_the_mesh(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_cell(ip, "%%tpu_prepare\nimport torch")
    run_cell(ip, "%%tpu_train --pod one-host --backend export --accelerator v5litepod-4 --spmd\n(world_size, mesh.size(), mesh.axis_names)")
    [run_dir] = (tmp_path / "tpu_nb_pod_runs").iterdir()
    assert json.loads((run_dir / "manifest.json").read_text())["run"]["mesh"] == "fsdp=4,tensor=1"
    environment = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}  # the v5litepod-4's 4 chips, as XLA:CPU devices
    done = subprocess.run([sys.executable, "train.py"], cwd=run_dir, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = load_result(run_dir / "results", 0)
    assert result is not None and result.value == (4, 4, ("fsdp", "tensor"))
