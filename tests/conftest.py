"""Shared test setup: every XLA use in tests goes to XLA:CPU in forked workers."""

from __future__ import annotations

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

from support.platforms import fake_torch_xla, make_system  # noqa: E402,F401 - fixtures for every test
