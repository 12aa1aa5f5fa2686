"""Gathering what validation needs from disk, the caches and the runtime (never starting XLA)."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

from tpu_nb.recipes.config import MASKED_LM, TEXT_CLASSIFICATION, TrainConfig
from tpu_nb.recipes.data import DataSourceError, load_splits
from tpu_nb.recipes.hub import hub_unreachable_reason
from tpu_nb.recipes.labels import label_facts
from tpu_nb.recipes.local_models import CONFIG_FILE, WEIGHT_FILES, find_local_models, is_model_directory
from tpu_nb.recipes.models import hub_options, lora_targets_known, model_size, position_limit
from tpu_nb.recipes.sources import looks_like_path
from tpu_nb.recipes.validation import ConfigProblem, DatasetFacts, Facts, ModelFacts, NotFound, NotFoundReason, validate


def check(config: TrainConfig) -> list[ConfigProblem]:
    """Every problem with `config`, loading what it takes to know (dataset, model config, runtime)."""
    return validate(config, gather_facts(config))


def gather_facts(config: TrainConfig) -> Facts:
    """What `validate` needs: the dataset's columns and labels, the model's limits, the output directory, the cores."""
    from tpu_nb.runtime import detect

    model = model_facts(config)
    local_models = tuple(found.name for found in find_local_models()) if isinstance(model, NotFound) else ()
    return Facts(
        dataset=dataset_facts(config),
        model=model,
        output_dir_problem=output_dir_problem(config.output_dir),
        devices=detect().devices,
        local_models=local_models,
        peft_installed=importlib.util.find_spec("peft") is not None,
    )


def dataset_facts(config: TrainConfig) -> DatasetFacts | NotFound:
    from datasets import Value

    try:
        train = load_splits(config).train
    except DataSourceError as error:
        return error.not_found
    columns = tuple(train.column_names)
    text_columns = tuple(
        name for name, feature in train.features.items() if isinstance(feature, Value) and feature.dtype in ("string", "large_string")
    )
    labels = None
    if config.task == TEXT_CLASSIFICATION and config.label_column in columns:
        labels = label_facts(train, config.label_column)
    return DatasetFacts(columns, text_columns, len(train), labels)


def model_facts(config: TrainConfig) -> ModelFacts | NotFound:
    from transformers import AutoConfig, AutoTokenizer

    name = config.model.strip()
    if not name:
        return NotFound("unreadable", "no model given")
    missing = _missing_model(name)
    if missing is not None:
        return missing
    try:
        model_config = AutoConfig.from_pretrained(name, **hub_options(name))
        has_mask_token = True
        if config.task == MASKED_LM:
            has_mask_token = AutoTokenizer.from_pretrained(name, **hub_options(name)).mask_token is not None
    except OSError as error:  # transformers reports a missing repo or file as OSError
        reason: NotFoundReason = "not_on_hub" if "not a valid model identifier" in str(error) else "unreadable"
        return NotFound(reason, str(error))
    except ValueError as error:  # e.g. a model_type this transformers does not know
        return NotFound("unreadable", str(error))
    limit, limit_name = position_limit(model_config)
    model_type = getattr(model_config, "model_type", None)
    return ModelFacts(limit, limit_name, has_mask_token, model_type, model_size(model_config), lora_targets_known(model_type))


def _missing_model(name: str) -> NotFound | None:
    """Why `name` cannot be loaded without trying to, or None."""
    from huggingface_hub import try_to_load_from_cache

    if looks_like_path(name):
        path = Path(name).expanduser().absolute()
        if not path.is_dir():
            return NotFound("no_such_path", str(path))
        if not is_model_directory(path):
            wanted = f"{CONFIG_FILE} and weights ({' or '.join(WEIGHT_FILES[::2])})"
            return NotFound("unreadable", f'"{path}" is not a model directory: it lacks {wanted}. Give the directory that holds them.')
        return None
    unreachable = hub_unreachable_reason()
    if unreachable is not None and not isinstance(try_to_load_from_cache(name, CONFIG_FILE), str):
        return NotFound("offline", unreachable)
    return None


def output_dir_problem(output_dir: str) -> str | None:
    """Why nothing can be written to `output_dir`, or None; creates nothing but a deleted probe file."""
    target = Path(output_dir).expanduser().absolute()
    existing = target
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f'"{existing}" is a file, not a directory'
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        return f'"{existing}" is not writable ({error.strerror or error})'
    return None
