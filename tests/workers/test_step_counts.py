"""A rank's counts: numbers and host tensors added on the host, what was never given left out."""

from __future__ import annotations

import numpy as np
import torch

from tpu_nb.workers.step_counts import HOST_SAMPLES, HOST_TOKENS, StepCounts, counted_from


def test_numbers_and_host_tensors_are_added_on_the_host() -> None:
    counts = StepCounts()
    counts.add(tokens=torch.tensor([1, 1, 0]).sum(), samples=np.int64(3))
    counts.add(tokens=5, samples=2)
    values = counts.values()
    assert values == {HOST_TOKENS: 7, HOST_SAMPLES: 5} and all(type(value) is int for value in values.values())
    assert counted_from(values) == (7, 5)


def test_what_was_never_given_is_not_counted() -> None:
    counts = StepCounts()
    assert counts.values() == {} and counted_from(counts.values()) == (None, None)
    counts.add(samples=8)
    counts.add()
    assert counted_from(counts.values()) == (None, 8)
