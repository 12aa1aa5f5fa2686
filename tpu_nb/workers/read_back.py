"""Reading a worker's tensors back to the host: pending XLA work run as one graph, keys named as the notebook's module names them."""

from __future__ import annotations

import sys

from tpu_nb.runtime.system import xla_runtime_started


def unwrapped_key(key: str) -> str:
    """A state-dict key without FSDPv2's wrappers.

    torch_xla's SpmdFullyShardedDataParallel (what a Trainer's FSDPv2 uses)
    replaces layers by wrappers in place, which adds `_orig_module.` to
    their keys; the notebook's module, never wrapped, has the plain ones.
    """
    return key.replace("_orig_module.", "")


def materialise_pending() -> None:
    """Run every pending XLA computation as one graph, if this process uses XLA.

    Reading lazy tensors one at a time compiles a graph per tensor: returning
    a tiny BERT that way cost 40 compilations and 80 s (measured).
    """
    if xla_runtime_started(sys.modules):
        sys.modules["torch_xla"].sync()
