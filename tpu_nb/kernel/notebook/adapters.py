"""PEFT adapters a worker added to a notebook module in place, added to the notebook's own copy before its weights load.

TRL's trainers given `peft_config=` (and a cell calling `get_peft_model` on a
model from the notebook) inject LoRA layers into the module they were handed:
in a worker, that is the notebook's module as forked. Its trained weights then
have keys (`q_proj.base_layer.weight`, `q_proj.lora_A.default.weight`) that
the notebook's copy lacks, and would not load. The worker sends each
adapter's config with the weights; here the same adapters are injected into
the notebook's module in place (`peft.inject_adapter_in_model`), so it ends
as the worker's did: the base model with its trained LoRA layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def adapters_to_add(module: Any, adapters: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The adapters the worker's module had and the notebook's `module` lacks, by name."""
    present = getattr(module, "peft_config", None)
    have = set(present) if isinstance(present, dict) else set()
    return {name: config for name, config in adapters.items() if name not in have}


def add_adapters(module: Any, adapters: Mapping[str, Mapping[str, Any]]) -> str:
    """Inject `adapters` into `module` in place; how to name them to the user ("default (LORA, r=8 on q_proj, v_proj)")."""
    from peft import get_peft_config, inject_adapter_in_model

    for name, config in adapters.items():
        inject_adapter_in_model(get_peft_config(dict(config)), module, adapter_name=name)
    return ", ".join(f"{name} ({describe(config)})" for name, config in adapters.items())


def describe(config: Mapping[str, Any]) -> str:
    kind = str(config.get("peft_type", "adapter"))
    rank = f", r={config['r']}" if "r" in config else ""
    targets = config.get("target_modules")
    # PEFT stores "all-linear" as every layer's full path: the kinds of layer are what the user chose.
    kinds = sorted({target.rsplit(".", 1)[-1] for target in targets}) if isinstance(targets, list) else None
    on = f" on {', '.join(kinds)}" if kinds else (f" on {targets}" if isinstance(targets, str) else "")
    return f"{kind}{rank}{on}"
