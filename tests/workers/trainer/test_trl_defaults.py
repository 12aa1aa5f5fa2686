"""TRL's configs in a worker: what pad_to_multiple_of="auto" pads to on XLA, and what the doctor is told of the padding."""

from __future__ import annotations

from typing import Any

import tpu_nb
from tpu_nb.workers.doctor.trl_padding import TrlPadding
from tpu_nb.workers.trainer.trl_defaults import padding_multiple

ARGUMENTS: dict[str, Any] = {"output_dir": "/tmp/tpu_nb-trl-defaults", "report_to": [], "per_device_train_batch_size": 8}


def test_auto_pads_to_one_length_where_it_can_else_to_multiples_of_128() -> None:
    assert padding_multiple(max_length=32, batch_size=8, flattened=False) == 32
    assert padding_multiple(max_length=1024, batch_size=8, flattened=False) == 128
    assert padding_multiple(max_length=None, batch_size=8, flattened=False) == 128
    # Packed rows of at most max_length, flattened end to end: batch size × max_length is every batch's length.
    assert padding_multiple(max_length=1024, batch_size=8, flattened=True) == 8192
    assert padding_multiple(max_length=None, batch_size=8, flattened=True) == 128  # padding-free without packing: no bound


def configs_in_a_worker() -> dict[str, Any]:
    """In the worker (a config's "auto" asks accelerate for the device, which would start XLA in pytest's process)."""
    from trl import DPOConfig, SFTConfig

    from tpu_nb.workers.trainer.trl_defaults import trl_padding

    return {
        "auto": SFTConfig(**ARGUMENTS, max_length=32).pad_to_multiple_of,
        "auto packed": SFTConfig(**ARGUMENTS, max_length=32, packing=True).pad_to_multiple_of,
        "to the longest": trl_padding(SFTConfig(**ARGUMENTS, max_length=32, pad_to_multiple_of=None)),
        "packed": trl_padding(SFTConfig(**ARGUMENTS, max_length=32, packing=True, pad_to_multiple_of=64)),
        "wrapped": trl_padding(SFTConfig(**ARGUMENTS, max_length=32, packing=True, packing_strategy="wrapped", pad_to_multiple_of=None)),
        "dpo": trl_padding(DPOConfig(**ARGUMENTS, padding_free=True, pad_to_multiple_of=None)),  # DPOTrainer turns padding-free off
    }


def test_auto_pads_packed_batches_to_one_length_and_the_doctor_is_told_how_a_config_pads() -> None:
    found = tpu_nb.launch(configs_in_a_worker, progress=False, timeout=120)
    assert (found["auto"], found["auto packed"]) == (32, 256)
    assert found["to the longest"] == TrlPadding(
        "SFTConfig", pad_to_multiple_of=None, max_length=32, padding_free=False, packing=False, batch_size=8, xla_multiple=32
    )
    assert (found["packed"].padding_free, found["packed"].pad_to_multiple_of, found["packed"].xla_multiple) == (True, 64, 256)
    assert not found["wrapped"].padding_free  # rows of exactly max_length, padded as usual
    assert (found["dpo"].config, found["dpo"].padding_free, found["dpo"].max_length, found["dpo"].xla_multiple) == (
        "DPOConfig",
        False,
        1024,
        128,
    )
