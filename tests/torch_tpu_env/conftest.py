"""Tests that run only inside the TorchTPU environment (.venv-torch-tpu, compat/torch-tpu-tpu.txt).

`make test-torch-tpu` (part of `make test-compat`) builds that venv, installs
tpu_nb into it as a user does, and runs pytest there on this directory alone
with TPU_NB_TORCH_TPU_ENV=1; everywhere else tests/conftest.py leaves this
directory out of collection. The kernel is started from a kernel spec of its
own whose argv names the environment's Python (TPU_NB_TORCH_TPU_PYTHON, by
default the Python running pytest), in a scratch directory, so that it imports
the installed tpu_nb and not this checkout.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from support.kernel import Kernel

# Named on the command line in another environment (tests/conftest.py leaves this directory out otherwise).
if os.environ.get("TPU_NB_TORCH_TPU_ENV") != "1":
    raise pytest.UsageError("tests/torch_tpu_env runs only in the TorchTPU environment: `make test-torch-tpu` builds it and runs it there")

TORCH_TPU_PYTHON = os.environ.get("TPU_NB_TORCH_TPU_PYTHON", sys.executable)
"""The environment's Python: `.venv-torch-tpu/bin/python` under `make test-torch-tpu`."""


@pytest.fixture
def torch_tpu_python() -> str:
    return TORCH_TPU_PYTHON


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    """A real ipykernel on the TorchTPU environment's Python, as a user's notebook there starts one."""
    spec = tmp_path / "kernels" / "torch-tpu"
    spec.mkdir(parents=True)
    argv = [TORCH_TPU_PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "TorchTPU", "language": "python"}))
    manager = KernelManager(kernel_name="torch-tpu", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)]))
    work = tmp_path / "notebook"
    work.mkdir()
    notebook = nbformat.v4.new_notebook()
    client = NotebookClient(
        notebook, km=manager, timeout=180, allow_errors=True, store_widget_state=True, resources={"metadata": {"path": str(work)}}
    )
    # As on a machine with torch_tpu and no torch_xla: no PJRT_DEVICE (tests/conftest.py sets it for XLA:CPU),
    # and torch's backend autoloading as a new kernel has it (make turns it off for pytest's own process).
    env = {name: value for name, value in os.environ.items() if name not in ("PJRT_DEVICE", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    with client.setup_kernel(env=env):
        yield Kernel(client, notebook)
