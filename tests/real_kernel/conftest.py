"""A real Jupyter kernel (ipykernel, started by jupyter_client) for each test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import nbformat
import pytest
from nbclient import NotebookClient
from support.kernel import Kernel


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    notebook = nbformat.v4.new_notebook()
    client = NotebookClient(notebook, kernel_name="python3", timeout=120, allow_errors=True, store_widget_state=True)
    env = dict(os.environ, PJRT_DEVICE="CPU")
    with client.setup_kernel(env=env):
        yield Kernel(client, notebook)
