"""XLA's seed through saves: the sync step undone exactly, and checked against the installed torch_xla in a worker."""

from __future__ import annotations

import tpu_nb
from tpu_nb.workers.checkpoints.xla_seed import MARK_STEP_ADD, MARK_STEP_MUL, seed_after_syncs, seed_before_sync, syncs_between


def test_a_sync_is_undone_exactly_for_any_seed() -> None:
    for seed in (0, 1, 101, 2**63 + 12345, 2**64 - 1):
        after = seed_after_syncs(seed, 1)
        assert after == (MARK_STEP_ADD + seed * MARK_STEP_MUL) % 2**64
        assert seed_before_sync(after) == seed
    assert syncs_between(101, seed_after_syncs(101, 3)) == 3
    assert syncs_between(101, 101) == 0
    assert syncs_between(101, 102) is None  # random work came between: no count of syncs explains it


def in_a_worker() -> dict[str, object]:
    """What torch_xla does to the seed here, and what seed_kept leaves."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    from tpu_nb.workers.checkpoints.xla_seed import current_seed, seed_kept

    device = torch_xla.device()
    xm.set_rng_state(12345)
    torch_xla.sync()
    after_one_sync = current_seed()
    xm.set_rng_state(777)
    masks = torch.nn.functional.dropout(torch.ones(64, device=device), 0.5)  # random work pending, as at a step's end
    with seed_kept() as kept:
        torch_xla.sync()  # a save's own syncs
        torch_xla.sync()
    torch_xla.sync()  # the step's next sync
    after_save = current_seed()
    xm.set_rng_state(777)
    again = torch.nn.functional.dropout(torch.ones(64, device=device), 0.5)
    torch_xla.sync()
    return {
        "after_one_sync": after_one_sync,
        "kept": kept,
        "after_save": after_save,
        "without_save": current_seed(),
        "same_masks": bool(torch.equal(masks.cpu(), again.cpu())),
    }


def test_the_installed_torch_xla_steps_the_seed_as_assumed_and_a_save_leaves_it_as_it_was() -> None:
    seen = tpu_nb.launch(in_a_worker, progress=False)
    assert seen["after_one_sync"] == seed_after_syncs(12345, 1)
    assert seen["kept"] == 777  # the seed before the step's own sync: what a checkpoint records
    assert seen["after_save"] == seen["without_save"] == seed_after_syncs(777, 1)
    assert seen["same_masks"]
