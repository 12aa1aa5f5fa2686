"""XLA's random seed through a run's saves: left as it was, so a run that saved (or resumed) draws what one that did not draws.

torch_xla keeps a root seed per device; every sync (MarkStep) turns it into
ADD + seed * MUL (modulo 2**64), and the random ops of a step derive their
seeds from it. A save syncs several times (the copy to the host, `xm.save`,
rendezvous), so without care each save would change every dropout mask after
it. The step is an affine map with an odd multiplier, so it can be undone:
`seed_kept` runs the pending work, notes the seed the step's own sync would
have left, and restores the seed that sync started from.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from tpu_nb.runtime.system import xla_runtime_started

MARK_STEP_ADD, MARK_STEP_MUL = 1012031, 7012063
"""What each sync does to XLA's root seed (torch_xla's MarkStep: seed = ADD + seed * MUL, modulo 2**64)."""


def seed_before_sync(seed: int) -> int:
    """The root seed a sync turned into `seed` (MUL is odd, so the step can be undone)."""
    return ((seed - MARK_STEP_ADD) * pow(MARK_STEP_MUL, -1, 2**64)) % 2**64


def seed_after_syncs(seed: int, syncs: int) -> int:
    for _ in range(syncs):
        seed = (MARK_STEP_ADD + seed * MARK_STEP_MUL) % 2**64
    return seed


def syncs_between(earlier: int, later: int, most: int = 64) -> int | None:
    """How many syncs turned XLA's seed `earlier` into `later` (None: not within `most`, or random work came between)."""
    for syncs in range(most + 1):
        if seed_after_syncs(earlier, syncs) == later:
            return syncs
    return None


def current_seed() -> int | None:
    """XLA's current seed in this worker, or None where XLA never ran."""
    if not xla_runtime_started(sys.modules):
        return None
    import torch_xla.core.xla_model as xm

    return int(xm.get_rng_state())


@contextlib.contextmanager
def seed_kept() -> Iterator[int | None]:
    """Run the step's pending work, then leave XLA's random seed as if nothing else had synced.

    A save syncs (the copy to the host, xm.save, rendezvous), and each sync moves the seed: a
    run that saved, or stopped and resumed, would draw other dropout masks than one that did
    not. The first sync here is the one the step's own would have been (the seed it gives is
    read); on leaving, the seed is set to what that sync started from, so the step's next sync
    gives the same seed again. Yields that seed (what a checkpoint's RNG state holds), or None
    where XLA never ran. Exact for loops that sync every step, as XLA training does
    (MpDeviceLoader, torch_xla.sync()).
    """
    if not xla_runtime_started(sys.modules):
        yield None
        return
    import torch_xla.core.xla_model as xm

    from tpu_nb.workers.readings.read_back import materialise_pending

    materialise_pending()
    seed = seed_before_sync(xm.get_rng_state())
    try:
        yield seed
    finally:
        xm.set_rng_state(seed)
