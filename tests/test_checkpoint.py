"""`tpu_nb.checkpoint` outside a worker: nothing to track, nothing skipped (inside one: tests/real_kernel/test_checkpoints_kernel.py)."""

from __future__ import annotations

import tpu_nb


def test_track_outside_a_worker_keeps_nothing_and_starts_at_zero() -> None:
    assert tpu_nb.checkpoint.track(model=object()) == 0


def test_skip_drops_the_batches_already_trained_on() -> None:
    assert list(tpu_nb.checkpoint.skip(iter(range(10)), 4)) == [4, 5, 6, 7, 8, 9]
    assert list(tpu_nb.checkpoint.skip(range(3), 0)) == [0, 1, 2]
