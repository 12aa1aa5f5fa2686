"""A worker's out-of-memory error explained with its sizes and the fixes: XLA's (RESOURCE_EXHAUSTED), and TorchTPU's
(which also names an operator it has no TPU kernel for)."""

from __future__ import annotations

import re

from tpu_nb.workers.doctor.torch_tpu_readings import advice_for_error

_USED_OF = re.compile(r"Used (?P<used>[\d.]+\s?[KMGT]i?B?) of (?P<limit>[\d.]+\s?[KMGT]i?B?) (?P<space>\w+)")
_ALLOCATE = re.compile(r"(?:allocate|allocating) (?P<size>[\d.]+\s?[KMGT]i?B?)", re.IGNORECASE)
_FREE = re.compile(r"(?P<free>[\d.]+\s?[KMGT]i?B?) free", re.IGNORECASE)

_TORCH_TPU_WORDS = ("is not implemented for TPU", "the TPU ran out of memory while awaiting")

FIXES = (
    "a smaller per-core batch (per_device_train_batch_size, or the DataLoader's batch_size), "
    "with gradient accumulation to keep the effective batch; bf16 (TrainingArguments(bf16=True), or model.to(torch.bfloat16)); "
    "gradient checkpointing (model.gradient_checkpointing_enable()); "
    "or shard the model over the cores instead of copying it to each: %%tpu_train --spmd"
)


def explain_out_of_memory(message: str) -> str | None:
    """What ran out and what to change, for a RESOURCE_EXHAUSTED error; None for any other error."""
    if "RESOURCE_EXHAUSTED" not in message:
        return None
    sizes = []
    if used := _USED_OF.search(message):
        sizes.append(f"used {used['used']} of {used['limit']} {used['space'].upper()}")
    if allocation := _ALLOCATE.search(message):
        sizes.append(f"could not allocate {allocation['size']}")
    if free := _FREE.search(message):
        sizes.append(f"{free['free']} free")
    measured = f" ({', '.join(sizes)})" if sizes else ""
    return f"The device ran out of memory{measured}. Fixes: {FIXES}."


def explain_torch_tpu_error(message: str) -> str | None:
    """What to change for TorchTPU's own out-of-memory and missing-operator errors; None for any other error.

    libtpu's compile-time "Ran out of memory in memory space hbm" is both
    stacks' (and RESOURCE_EXHAUSTED on torch_xla): only TorchTPU's own words
    are taken here, so a torch_xla run keeps its own advice.
    """
    if not any(words in message for words in _TORCH_TPU_WORDS):
        return None
    advice = advice_for_error(message)
    return None if advice is None else f"{advice.title}. Fix: {advice.fix}."
