from __future__ import annotations

import pytest
from support.clock import FakeClock
from support.run_events import RANKS

from tpu_nb.kernel.progress.state import ProgressState


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def progress(clock: FakeClock) -> ProgressState:
    return ProgressState("%%tpu_train", "Kaggle TPU v5e-8", expected_workers=len(RANKS), clock=clock)
