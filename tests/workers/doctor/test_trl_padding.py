"""The config line a TRL trainer's user is told when its batches' shapes change, for each way TRL pads."""

from __future__ import annotations

from tpu_nb.workers.doctor.trl_padding import TrlPadding, shape_fix

LENGTH = frozenset({"length"})
SFT_TO_LONGEST = TrlPadding(
    "SFTConfig", pad_to_multiple_of=None, max_length=32, padding_free=False, packing=False, batch_size=8, xla_multiple=32
)


def test_padding_to_the_longest_sequence_is_fixed_by_pad_to_multiple_of() -> None:
    fix = shape_fix(SFT_TO_LONGEST, LENGTH)
    assert fix.startswith("SFTConfig(pad_to_multiple_of=32): TRL's collator pads each batch only to its longest sequence")
    assert "the batches take one shape (max_length=32)" in fix and "drop_last" not in fix
    assert fix.endswith("Left at its default 'auto', tpu_nb pads so on XLA")
    dpo = TrlPadding(
        "DPOConfig", pad_to_multiple_of=None, max_length=1024, padding_free=False, packing=False, batch_size=4, xla_multiple=128
    )
    assert shape_fix(dpo, LENGTH).startswith("DPOConfig(pad_to_multiple_of=128): ")
    assert "at most 8 shapes (max_length=1024)" in shape_fix(dpo, LENGTH)
    # Already padded to multiples of 128 and still compiling per multiple: one length for all, max_length.
    bucketed = shape_fix(TrlPadding("DPOConfig", 128, 1024, False, False, 4, 128), LENGTH)
    assert bucketed.startswith("DPOConfig(pad_to_multiple_of=1024): TRL's collator pads each batch to a multiple of 128")
    assert bucketed.endswith("Its default 'auto' pads to a multiple of 128 on XLA")
    assert "max_length=... bounds how many" in shape_fix(TrlPadding("SFTConfig", None, None, False, False, 8, 128), LENGTH)


def test_packed_or_padding_free_batches_are_padded_to_one_length_or_a_few() -> None:
    packed = shape_fix(
        TrlPadding("SFTConfig", None, max_length=32, padding_free=True, packing=True, batch_size=8, xla_multiple=256), LENGTH
    )
    assert packed.startswith(
        "SFTConfig(pad_to_multiple_of=256): packing=True (a 'bfd' strategy) makes TRL flatten each batch into one sequence"
    )
    assert "into one sequence as long as its tokens, not padded (pad_to_multiple_of=None): a new length almost every batch" in packed
    assert "(per_device_train_batch_size 8 × max_length 32), every batch has one length" in packed
    assert "packing_strategy='wrapped'" in packed
    assert "padding_free=False" not in packed  # TRL turns padding-free on for 'bfd' packing whatever padding_free says
    free = shape_fix(
        TrlPadding("SFTConfig", None, max_length=None, padding_free=True, packing=False, batch_size=8, xla_multiple=128), LENGTH
    )
    assert free.startswith("SFTConfig(pad_to_multiple_of=128): padding_free=True makes TRL flatten each batch into one sequence")
    assert "one shape per multiple" in free and "padding_free=False with max_length=N, pad_to_multiple_of=N" in free


def test_a_last_partial_batch_is_fixed_by_dataloader_drop_last() -> None:
    fix = shape_fix(SFT_TO_LONGEST, frozenset({"batch"}))
    assert (
        fix
        == "SFTConfig(dataloader_drop_last=True): the data's last batch is smaller than per_device_train_batch_size=8 and compiles the step again"
    )
    both = shape_fix(SFT_TO_LONGEST, frozenset({"batch", "length"}))
    assert both.startswith("SFTConfig(pad_to_multiple_of=32): ") and both.endswith(fix)
