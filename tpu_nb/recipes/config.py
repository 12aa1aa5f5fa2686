"""What to fine-tune, on what, and how: one frozen, JSON-serialisable configuration.

Stdlib only: this is imported by workers and by the picker before torch or
transformers are.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

TEXT_CLASSIFICATION = "text-classification"
MASKED_LM = "masked-lm"
CAUSAL_LM = "causal-lm"
TASKS = (TEXT_CLASSIFICATION, MASKED_LM, CAUSAL_LM)

DEMO_DATASET = "demo"

DATA_PARALLEL = "data-parallel"
"""A whole replica of the model on every TPU core (`tpu_nb.launch(fine_tuning.train)`)."""
FSDP = "fsdp"
"""Parameters, gradients and optimizer states split over the cores (SPMD, FSDPv2: `launch(..., spmd=True)`)."""
STRATEGIES = (DATA_PARALLEL, FSDP)

# Where a task's defaults differ from TrainConfig's own (which suit text classification).
TASK_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    TEXT_CLASSIFICATION: {},
    MASKED_LM: {"warmup": 0.0},
    CAUSAL_LM: {"max_length": 256, "per_core_batch_size": 8, "warmup": 0.0},
}


class ConfigError(ValueError):
    """A configuration that cannot be read (bad JSON, unknown keys, wrong types)."""


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """One fine-tuning run. `validate`/`check` report every problem at once; `prepare` loads it."""

    model: str
    """A Hugging Face Hub id (e.g. "distilbert/distilbert-base-uncased") or a local model directory."""
    task: str = TEXT_CLASSIFICATION
    """One of TASKS."""
    dataset: str = DEMO_DATASET
    """A Hub dataset id, a local .csv/.tsv/.json/.jsonl/.parquet/.txt file, or "demo" (built in)."""
    dataset_config: str | None = None
    """The Hub dataset's configuration name (e.g. "sst2" for "nyu-mll/glue")."""
    train_split: str = "train"
    eval_split: str | None = None
    """A split name (or, for a local file dataset, another file); None uses the "validation" split if
    there is one, else holds out `eval_fraction` of the training rows."""
    eval_fraction: float = 0.1
    text_column: str = "text"
    label_column: str = "label"
    """Only used for text classification."""
    max_length: int = 128
    """Tokens per example: classification pads/truncates to it, language modelling packs blocks of it."""
    per_core_batch_size: int = 16
    epochs: float = 1.0
    max_steps: int | None = None
    """When set, train this many steps instead of `epochs`."""
    learning_rate: float = 5e-5
    warmup: float = 0.1
    """Below 1: a share of the training steps; from 1: a number of steps (as transformers' warmup_steps)."""
    weight_decay: float = 0.01
    bf16: bool = False
    mlm_probability: float = 0.15
    """Only used for masked language modelling."""
    strategy: str = DATA_PARALLEL
    """How the cores share the work: one of STRATEGIES. "fsdp" is for models a core cannot hold whole."""
    lora_rank: int | None = None
    """Causal language models only: train LoRA adapters of this rank instead of every weight (needs peft)."""
    eval_steps: int | None = None
    """Evaluate every this many steps; None evaluates only at the end."""
    save_steps: int | None = None
    """Save a checkpoint every this many steps; None saves only the final model."""
    logging_steps: int = 10
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    output_dir: str = "tpu_nb_output"
    seed: int = 42

    @classmethod
    def for_task(cls, task: str, model: str) -> TrainConfig:
        """The defaults for fine-tuning `model` on `task`."""
        return cls(model=model, task=task, **TASK_DEFAULTS.get(task, {}))

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        """Read `to_json()`'s output; raises ConfigError naming unknown keys, missing keys or wrong types."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"the configuration is not valid JSON: {error}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"the configuration must be a JSON object, not {type(data).__name__}.")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """A TrainConfig from a mapping of field names to JSON-style values; raises ConfigError as `from_json`."""
        known = [field.name for field in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"unknown keys in the configuration: {_quoted(unknown)}; the known keys are: {', '.join(known)}.")
        missing = [field.name for field in fields(cls) if _required(field) and field.name not in data]
        if missing:
            raise ConfigError(f"the configuration lacks required keys: {_quoted(missing)}.")
        wrong = [_type_problem(name, data[name]) for name in known if name in data]
        problems = [problem for problem in wrong if problem is not None]
        if problems:
            raise ConfigError("; ".join(problems) + ".")
        return cls(**data)


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


_HINTS = typing.get_type_hints(TrainConfig)


def _type_problem(name: str, value: Any) -> str | None:
    """Why `value` does not fit field `name`'s type, or None."""
    allowed = typing.get_args(_HINTS[name]) or (_HINTS[name],)
    for kind in allowed:
        if kind is type(None) and value is None:
            return None
        # JSON has one number type and bool is an int in Python: accept ints
        # for float fields, never bools for numbers.
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return None
        if kind in (int, str, bool) and type(value) is kind:
            return None
    expected = " or ".join("null" if kind is type(None) else kind.__name__ for kind in allowed)
    return f"{name} must be {expected}, not {json.dumps(value)}"


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{name}"' for name in names)
