"""Reading a worker's tensors back: FSDPv2's wrapper names dropped; nothing to run where XLA never ran."""

from __future__ import annotations

import sys

from tpu_nb.runtime.system import xla_runtime_started
from tpu_nb.workers.read_back import materialise_pending, unwrapped_key


def test_fsdp_wrapper_names_are_dropped_from_state_dict_keys() -> None:
    assert (
        unwrapped_key("bert.encoder.layer.0._orig_module.attention.self.query.weight") == "bert.encoder.layer.0.attention.self.query.weight"
    )
    assert unwrapped_key("classifier.weight") == "classifier.weight"


def test_materialising_where_xla_never_ran_does_nothing_and_starts_nothing() -> None:
    started = xla_runtime_started(sys.modules)
    materialise_pending()
    assert xla_runtime_started(sys.modules) == started
