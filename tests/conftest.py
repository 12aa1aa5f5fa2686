"""Shared test setup: every XLA use in tests goes to XLA:CPU in forked workers."""

from __future__ import annotations

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell
from support.platforms import fake_torch_xla, make_system  # noqa: F401 - fixtures for every test


@pytest.fixture
def ip() -> Iterator[InteractiveShell]:
    """A real IPython shell with tpu_nb loaded."""
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tpu_nb")
    yield shell
    shell.run_line_magic("unload_ext", "tpu_nb")
