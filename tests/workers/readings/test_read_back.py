"""Reading a worker's tensors back: FSDPv2's wrapper names dropped; nothing to run where XLA never ran; a host copy
of its own (an XLA tensor's is exercised by every return and checkpoint in the kernel tests)."""

from __future__ import annotations

import sys

import torch

from tpu_nb.runtime.system import xla_runtime_started
from tpu_nb.workers.readings.read_back import host_copy, materialise_pending, unwrapped_key


def test_fsdp_wrapper_names_are_dropped_from_state_dict_keys() -> None:
    assert (
        unwrapped_key("bert.encoder.layer.0._orig_module.attention.self.query.weight") == "bert.encoder.layer.0.attention.self.query.weight"
    )
    assert unwrapped_key("classifier.weight") == "classifier.weight"


def test_materialising_where_xla_never_ran_does_nothing_and_starts_nothing() -> None:
    started = xla_runtime_started(sys.modules)
    materialise_pending()
    assert xla_runtime_started(sys.modules) == started


def test_a_host_copy_is_contiguous_and_its_own() -> None:
    weights = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    copy = host_copy(weights.t())  # a transposed view: not contiguous
    assert copy.is_contiguous() and not copy.requires_grad and torch.equal(copy, weights.detach().t())
    with torch.no_grad():
        weights.add_(1)  # the next step changes the weights, never the copy
    assert torch.equal(copy, torch.arange(6.0).reshape(2, 3).t())
