"""What TRL's "auto" padding becomes on XLA."""

from __future__ import annotations

from tpu_nb.workers.trainer.trl_defaults import padding_multiple


def test_short_sequences_pad_to_max_length_and_long_ones_to_multiples_of_128() -> None:
    assert padding_multiple(32) == 32  # one shape for every batch
    assert padding_multiple(128) == 128
    assert padding_multiple(1024) == 128  # at most 8 shapes, as TRL pads on Neuron
    assert padding_multiple(None) == 128  # no truncation: lengths grow in steps of 128
