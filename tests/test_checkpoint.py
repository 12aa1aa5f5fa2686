"""`tpu_nb.checkpoint` outside a worker: nothing to track, nothing skipped, arguments checked (inside one: tests/real_kernel/test_checkpoints_kernel.py)."""

from __future__ import annotations

import tpu_nb


def test_track_outside_a_worker_keeps_nothing_and_starts_at_zero() -> None:
    import torch

    assert tpu_nb.checkpoint.track(model=torch.nn.Linear(2, 1)) == 0


def test_skip_drops_the_batches_already_trained_on() -> None:
    assert list(tpu_nb.checkpoint.skip(iter(range(10)), 4)) == [4, 5, 6, 7, 8, 9]
    assert list(tpu_nb.checkpoint.skip(range(3), 0)) == [0, 1, 2]


def test_track_refuses_what_cannot_be_checkpointed_at_once_naming_the_argument() -> None:
    import pytest
    import torch

    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2)
    with pytest.raises(TypeError) as refused:
        tpu_nb.checkpoint.track(model=torch.nn.Linear(2, 1), loader=loader)
    said = str(refused.value)
    assert said.startswith("tpu_nb.checkpoint.track(loader=...): a DataLoader has no state_dict()")
    assert "tpu_nb.checkpoint.skip(loader, start)" in said  # what to do with a loader instead
    with pytest.raises(TypeError, match=r"track\(\): name what each checkpoint keeps"):
        tpu_nb.checkpoint.track()
