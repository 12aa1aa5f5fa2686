"""Fine-tuning recipes: text classification, masked and causal language modelling.

    config = TrainConfig(model="distilbert/distilbert-base-uncased", dataset="demo")
    check(config)                                   # every problem at once, each with its fix
    fine_tuning = prepare(config)                   # in the notebook: tokenizer, model, tokenized data
    result = tpu_nb.launch(fine_tuning.train)       # on every TPU core (strategy "fsdp": spmd=True)
    model = fine_tuning.load_trained()

Importing this package is cheap (stdlib only): torch, transformers and
datasets are imported when a function needs them, because every TPU worker
imports tpu_nb. `training` calls `tpu_nb.launch` and `tpu_nb.in_worker`
through the package's face, as a user would: the one import of the face, which
stands above every floor (setup.cfg's floors contract), from below it.

Modules: `config` (TrainConfig), `validation` (check, with `facts` gathered from
disk and the runtime, `sources` and `local_models` telling where things come
from, `hub` whether it answers), `memory` (the estimate), `preparation`
(prepare: `models`, `data`, `labels`, `demo_data`), `training` (the worker's
part), `metrics`, `codegen` (code_for: a ready cell).
"""

from __future__ import annotations

from tpu_nb.recipes.codegen import code_for
from tpu_nb.recipes.config import (
    CAUSAL_LM,
    DATA_PARALLEL,
    DEMO_DATASET,
    FSDP,
    MASKED_LM,
    STRATEGIES,
    TASKS,
    TEXT_CLASSIFICATION,
    ConfigError,
    TrainConfig,
)
from tpu_nb.recipes.facts import check, gather_facts
from tpu_nb.recipes.local_models import LocalModel, find_local_models
from tpu_nb.recipes.memory import MemoryEstimate, ModelSize, estimate_for, estimate_memory
from tpu_nb.recipes.preparation import InvalidConfig, prepare
from tpu_nb.recipes.training import FineTuning, NotInWorker, TrainingResult, WrongLaunch
from tpu_nb.recipes.validation import ConfigProblem, DatasetFacts, Facts, LabelFacts, ModelFacts, NotFound, validate

__all__ = [
    "CAUSAL_LM",
    "DATA_PARALLEL",
    "DEMO_DATASET",
    "FSDP",
    "MASKED_LM",
    "STRATEGIES",
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
    "MemoryEstimate",
    "ModelFacts",
    "ModelSize",
    "NotFound",
    "NotInWorker",
    "TrainConfig",
    "TrainingResult",
    "WrongLaunch",
    "check",
    "code_for",
    "estimate_for",
    "estimate_memory",
    "find_local_models",
    "gather_facts",
    "prepare",
    "validate",
]
