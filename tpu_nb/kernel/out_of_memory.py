"""A worker's XLA out-of-memory error (RESOURCE_EXHAUSTED), explained with its sizes and the fixes."""

from __future__ import annotations

import re

_USED_OF = re.compile(r"Used (?P<used>[\d.]+\s?[KMGT]i?B?) of (?P<limit>[\d.]+\s?[KMGT]i?B?) (?P<space>\w+)")
_ALLOCATE = re.compile(r"(?:allocate|allocating) (?P<size>[\d.]+\s?[KMGT]i?B?)", re.IGNORECASE)
_FREE = re.compile(r"(?P<free>[\d.]+\s?[KMGT]i?B?) free", re.IGNORECASE)

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
