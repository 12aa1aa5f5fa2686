"""A real kernel whose /dev/shm is 64 MB, as Docker gives containers: big results still come back.

The kernel runs in a private mount namespace (root only, as in CI): a 64 MB
tmpfs on /dev/shm, and for the second test a 150 MB tmpfs as its temporary
directory, standing in for a nearly full disk.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from support.kernel import Kernel, text_of
from support.mounts import in_namespace

SETUP = """
%load_ext tpu_nb
import glob, os, tempfile, torch, tpu_nb
torch.manual_seed(0)
model = torch.nn.Linear(5000, 5000)  # 100 MB of weights
def two_hundred_mb():
    return {"weights": torch.ones(50_000_000)}
"""

LEFT_BEHIND = "print(glob.glob(f'/dev/shm/tpu_nb-{os.getpid()}-*') + glob.glob(f'{tempfile.gettempdir()}/tpu_nb-results-{os.getpid()}-*'))"


def small_shm_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, temp_size: str | None) -> Iterator[Kernel]:
    """A kernel started through a kernelspec of its own, inside the mount namespace."""
    mounts = {Path("/dev/shm"): "64m"}
    env = {"PJRT_DEVICE": "CPU"}
    if temp_size is not None:
        temp = tmp_path / "small-temp"
        mounts[temp] = temp_size
        env["TMPDIR"] = str(temp)
    argv = in_namespace(mounts, [sys.executable, "-m", "ipykernel_launcher", "-f", "CONNECTION_FILE"])
    spec = tmp_path / "kernels" / "small-shm"
    spec.mkdir(parents=True)
    argv[-1] = argv[-1].replace("CONNECTION_FILE", "{connection_file}")
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "small shm", "language": "python", "env": env}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    notebook = nbformat.v4.new_notebook()
    client = NotebookClient(notebook, kernel_name="small-shm", timeout=300, allow_errors=True)
    with client.setup_kernel(env=dict(os.environ, **env)):
        kernel = Kernel(client, notebook)
        assert "64M" in text_of(kernel.run("!df -h /dev/shm"))
        kernel.run(SETUP)
        yield kernel


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kernel]:
    yield from small_shm_kernel(tmp_path, monkeypatch, temp_size=None)


@pytest.fixture
def kernel_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kernel]:
    yield from small_shm_kernel(tmp_path, monkeypatch, temp_size="150m")


def test_results_bigger_than_shared_memory_come_back_whole(kernel: Kernel) -> None:
    launched = kernel.run(
        "result = tpu_nb.launch(two_hundred_mb, progress=False)\nprint(result['weights'].shape, float(result['weights'].sum()))"
    )
    assert "torch.Size([50000000]) 50000000.0" in text_of(launched), text_of(launched)
    trained = kernel.run("%%tpu_train --return model --no-progress\nmodel.to(device)\nwith torch.no_grad():\n    model.weight.fill_(0.5)")
    assert "updated `model` in place" in text_of(trained), text_of(trained)
    assert "0.5 0.5" in text_of(kernel.run("print(float(model.weight[0, 0]), float(model.weight[-1, -1]))"))
    assert "[]" in text_of(kernel.run(LEFT_BEHIND))


def test_a_value_no_place_can_hold_is_an_error_with_the_sizes_and_the_weights_still_come_back(kernel_on_a_full_disk: Kernel) -> None:
    kernel = kernel_on_a_full_disk
    cell = kernel.run(
        "%%tpu_train --return model --no-progress\nmodel.to(device)\nwith torch.no_grad():\n    model.weight.fill_(0.25)\ntorch.ones(50_000_000)"
    )
    text = text_of(cell)
    assert "updated `model` in place" in text, text
    assert "NotReturned: the value (190.8 MiB) could not be sent back: no place had room for it (/dev/shm/tpu_nb-" in text, text
    assert "small-temp/tpu_nb-results-" in text and "No space left on device" in text and "Free space there, or send back less" in text
    assert "0.25" in text_of(kernel.run("print(float(model.weight[0, 0]))"))
    assert "[]" in text_of(kernel.run(LEFT_BEHIND))
