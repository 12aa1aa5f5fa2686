"""`code_for(config)`: a ready notebook cell that trains a configuration.

One ordinary cell, not a `%%tpu_train` pair: a frontend inserts one cell per
`set_next_input`, and the preparation has to run in the kernel (before the
workers fork) while a `%%tpu_train` cell runs only in the workers.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from tpu_nb.recipes.config import FSDP, TEXT_CLASSIFICATION, TrainConfig
from tpu_nb.recipes.training import launch_line

_ALWAYS_SHOWN = ("model", "task", "dataset")


def code_for(config: TrainConfig) -> str:
    """The source of one cell: prepare in the notebook, train on every TPU core, load the trained model."""
    lines = [
        f"# Fine-tune {config.model} ({config.task}) on {config.dataset} with tpu_nb.",
        "import tpu_nb",
        "from tpu_nb.recipes import TrainConfig, prepare",
        "",
        "config = TrainConfig(",
        *(f"    {name}={_literal(value)}," for name, value in _settings(config)),
        ")",
        "# Tokenizer, model and tokenized data load here, once: every TPU worker shares them.",
        "fine_tuning = prepare(config)",
        *(["# FSDP: one SPMD worker drives every core; the model's weights are split over them."] if config.strategy == FSDP else []),
        "# Trains on every TPU core with a live dashboard, then puts the trained weights into `model`.",
        f"result = {launch_line(config)}",
        "model, tokenizer = fine_tuning.load_trained(), fine_tuning.tokenizer",
    ]
    if config.task == TEXT_CLASSIFICATION:
        lines.append('# Predict: transformers.pipeline("text-classification", model=model, tokenizer=tokenizer)("what a great film")')
    lines.append("print(result)")
    return "\n".join(lines) + "\n"


def _settings(config: TrainConfig) -> list[tuple[str, Any]]:
    """The fields to write out: model, task and dataset, then those that differ from the defaults."""
    defaults = TrainConfig(model=config.model)
    shown = [(name, getattr(config, name)) for name in _ALWAYS_SHOWN]
    for field in fields(config):
        value = getattr(config, field.name)
        if field.name not in _ALWAYS_SHOWN and value != getattr(defaults, field.name):
            shown.append((field.name, value))
    return shown


def _literal(value: Any) -> str:
    # JSON string syntax is valid Python and gives double quotes.
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)
