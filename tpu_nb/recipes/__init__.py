"""Fine-tuning recipes: text classification, masked and causal language modelling.

    config = TrainConfig(model="distilbert/distilbert-base-uncased", dataset="demo")
    check(config)                                   # every problem at once, each with its fix
    fine_tuning = prepare(config)                   # in the notebook: tokenizer, model, tokenized data
    result = tpu_nb.launch(fine_tuning.train)       # on every TPU core
    model = fine_tuning.load_trained()

Importing this package is cheap (stdlib only): torch, transformers and
datasets are imported when a function needs them, because every TPU worker
imports tpu_nb.
"""

from __future__ import annotations

from .codegen import code_for
from .config import CAUSAL_LM, DEMO_DATASET, MASKED_LM, TASKS, TEXT_CLASSIFICATION, ConfigError, TrainConfig
from .facts import check, gather_facts
from .local_models import LocalModel, find_local_models
from .preparation import InvalidConfig, prepare
from .training import FineTuning, NotInWorker, TrainingResult
from .validation import ConfigProblem, DatasetFacts, Facts, LabelFacts, ModelFacts, NotFound, validate

__all__ = [
    "CAUSAL_LM",
    "DEMO_DATASET",
    "MASKED_LM",
    "TASKS",
    "TEXT_CLASSIFICATION",
    "ConfigError",
    "ConfigProblem",
    "DatasetFacts",
    "Facts",
    "FineTuning",
    "InvalidConfig",
    "LabelFacts",
    "LocalModel",
    "ModelFacts",
    "NotFound",
    "NotInWorker",
    "TrainConfig",
    "TrainingResult",
    "check",
    "code_for",
    "find_local_models",
    "gather_facts",
    "prepare",
    "validate",
]
