"""How a TRL trainer pads its batches, and the line of its config that gives every step the same input shapes.

TRL's SFTTrainer and DPOTrainer tokenise and pad their batches themselves,
so the doctor's usual fix for a changing sequence length (`tokenizer(...,
padding='max_length')`) names a call their user never makes. What they own is
the config: `pad_to_multiple_of` (TRL's collators pad each batch to its
longest sequence, or up to a multiple of it), and for SFT, padding-free
batches (`padding_free=True`, or `packing=True`, whose "bfd" strategies turn
padding-free on): each batch's sequences flattened into one row as long as
their tokens, padded up to a multiple of `pad_to_multiple_of` too
(trl/trainer/sft_trainer.py, `DataCollatorForLanguageModeling`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TrlPadding:
    """How a TRL trainer's collator pads: its config's settings as the trainer runs with them."""

    config: str  # the config's class, e.g. "SFTConfig"
    pad_to_multiple_of: int | None
    max_length: int | None
    padding_free: bool  # each batch flattened into one sequence (SFT's padding_free=True, or packing with a "bfd" strategy)
    packing: bool
    batch_size: int  # per_device_train_batch_size
    xla_multiple: int  # what pad_to_multiple_of="auto" pads to on XLA for this config (trainer/trl_defaults)


def shape_fix(padding: TrlPadding, dimensions: frozenset[str]) -> str:
    """The fix for inputs whose `dimensions` ("batch", "length") change between batches, in the config's words."""
    fixes = []
    if "length" in dimensions or not dimensions:
        fixes.append(length_fix(padding))
    if "batch" in dimensions:
        fixes.append(
            f"{padding.config}(dataloader_drop_last=True): the data's last batch is smaller than "
            f"per_device_train_batch_size={padding.batch_size} and compiles the step again"
        )
    return "; ".join(fixes)


def length_fix(padding: TrlPadding) -> str:
    """The config line that pads every batch to one length (or a few), and why the length changes now."""
    config, given = padding.config, padding.pad_to_multiple_of
    if padding.padding_free:
        return _flattened_fix(padding)
    multiple = padding.xla_multiple
    if given is not None and given >= multiple and padding.max_length is not None and given < padding.max_length:
        multiple = padding.max_length  # already bucketed, yet compiling per bucket: one shape for all
    now = "only to its longest sequence" if given is None else f"to a multiple of {given}"
    if padding.max_length is None:
        shapes = f"one shape per multiple of {multiple} (max_length=... bounds how many)"
    elif multiple >= padding.max_length:
        shapes = f"one shape (max_length={padding.max_length})"
    else:
        shapes = f"at most {math.ceil(padding.max_length / multiple)} shapes (max_length={padding.max_length})"
    return (
        f"{config}(pad_to_multiple_of={multiple}): TRL's collator pads each batch {now} (pad_to_multiple_of={given}), "
        f"and each new length compiles the step again; padded to a multiple of {multiple}, the batches take {shapes}. "
        f"{_auto(padding, multiple)}"
    )


def _flattened_fix(padding: TrlPadding) -> str:
    config, multiple = padding.config, padding.xla_multiple
    cause = "packing=True (a 'bfd' strategy)" if padding.packing else "padding_free=True"
    given = padding.pad_to_multiple_of
    padded = "not padded (pad_to_multiple_of=None)" if given is None else f"padded to a multiple of {given}"
    flattened = (
        f"{config}(pad_to_multiple_of={multiple}): {cause} makes TRL flatten each batch into one sequence as long as its "
        f"tokens, {padded}: a new length almost every batch"
    )
    if padding.packing and padding.max_length is not None:
        # Packed rows hold at most max_length tokens each: batch size x max_length bounds every flattened batch.
        return (
            f"{flattened}; padded to {multiple} (per_device_train_batch_size {padding.batch_size} × max_length "
            f"{padding.max_length}), every batch has one length. {_auto(padding, multiple)}; or "
            "packing_strategy='wrapped' (rows of exactly max_length, not flattened)"
        )
    return (
        f"{flattened}; padded to a multiple of {multiple}, one shape per multiple. {_auto(padding, multiple)}; or "
        "padding_free=False with max_length=N, pad_to_multiple_of=N (every batch padded to N: one shape)"
    )


def _auto(padding: TrlPadding, multiple: int) -> str:
    """What leaving pad_to_multiple_of at TRL's default does on XLA, when it is what the fix says."""
    if multiple == padding.xla_multiple:
        return "Left at its default 'auto', tpu_nb pads so on XLA"
    return f"Its default 'auto' pads to a multiple of {padding.xla_multiple} on XLA"
