"""Every problem with a configuration at once, each saying what to do.

Pure: what the check needs to know about the dataset, the model, the output
directory and the machine comes in as `Facts` (`tpu_nb.recipes.facts`
gathers them from disk, the cache and the runtime).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tpu_nb.recipes.config import CAUSAL_LM, MASKED_LM, STRATEGIES, TASKS, TEXT_CLASSIFICATION, TrainConfig
from tpu_nb.recipes.memory import ModelSize
from tpu_nb.recipes.sources import DATA_FILE_BUILDERS, UNSUPPORTED_FILE_SUFFIXES, dataset_kind, file_suffix

MAX_CLASSES = 100
"""More distinct labels than this and a column is not a set of classes (an id, a score, a text)."""

_READABLE_FORMATS = ", ".join(sorted(set(DATA_FILE_BUILDERS)))


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem: the TrainConfig field to change and a message saying how."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class LabelFacts:
    """What the label column holds (in the training split)."""

    distinct: int
    examples: tuple[str, ...]
    fractional_example: str | None = None
    """A non-integer number found in the column, if any."""


@dataclass(frozen=True, slots=True)
class DatasetFacts:
    columns: tuple[str, ...]
    text_columns: tuple[str, ...]
    """The columns holding strings."""
    train_rows: int
    labels: LabelFacts | None = None
    """Of the configured label column, for classification when it exists."""


@dataclass(frozen=True, slots=True)
class ModelFacts:
    position_limit: int | None
    limit_name: str = "max_position_embeddings"
    has_mask_token: bool = True
    model_type: str | None = None
    size: ModelSize | None = None
    """Parameters and shape, for the memory estimate (None when unknown)."""
    lora_targets_known: bool = True
    """Whether peft knows which layers of this model type to adapt."""


NotFoundReason = Literal["no_such_path", "offline", "not_on_hub", "unreadable"]


@dataclass(frozen=True, slots=True)
class NotFound:
    """A model or dataset that could not be loaded, and why."""

    reason: NotFoundReason
    detail: str = ""
    field: str | None = None
    """The field to blame when it is not `model`/`dataset` (e.g. a split name)."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What validation knows beyond the configuration; None means "not checked"."""

    dataset: DatasetFacts | NotFound | None = None
    model: ModelFacts | NotFound | None = None
    output_dir_problem: str | None = None
    devices: int = 1
    local_models: tuple[str, ...] = ()
    """Models found on this machine, offered when the chosen one cannot be loaded."""
    peft_installed: bool = True


def validate(config: TrainConfig, facts: Facts | None = None) -> list[ConfigProblem]:
    """All problems with `config`, in field order; an empty list means it can be prepared."""
    facts = facts or Facts()
    problems = [*_choice_problems(config), *_number_problems(config)]
    problems += _dataset_problems(config, facts)
    problems += _model_problems(config, facts)
    if config.lora_rank is not None and config.task == CAUSAL_LM and not facts.peft_installed:
        problems.append(ConfigProblem("lora_rank", "LoRA needs peft: pip install 'tpu_nb[lora]' (or pip install peft), then check again."))
    if facts.output_dir_problem is not None:
        problems.append(
            ConfigProblem(
                "output_dir",
                f'cannot write to "{config.output_dir}": {facts.output_dir_problem}. Choose a directory you can write to, e.g. "./tpu_nb_output".',
            )
        )
    return problems


def _choice_problems(config: TrainConfig) -> list[ConfigProblem]:
    """Task, model, dataset and columns: what can be judged without loading them."""
    problems = []
    if config.task not in TASKS:
        problems.append(ConfigProblem("task", f'unknown task "{config.task}"; use one of: {", ".join(TASKS)}.'))
    if not config.model.strip():
        problems.append(
            ConfigProblem(
                "model", 'choose a model: a Hugging Face Hub id such as "distilbert/distilbert-base-uncased", or a local model directory.'
            )
        )
    if not config.dataset.strip():
        problems.append(ConfigProblem("dataset", 'choose a dataset: a Hub id, a local data file, or "demo" (built in).'))
    elif dataset_kind(config.dataset) == "file" and file_suffix(config.dataset) in UNSUPPORTED_FILE_SUFFIXES:
        problems.append(
            ConfigProblem(
                "dataset",
                f'cannot read "{file_suffix(config.dataset)}" files; save the data as one of {_READABLE_FORMATS} '
                "(.txt: one text per line) and give that file.",
            )
        )
    if not config.text_column.strip():
        problems.append(ConfigProblem("text_column", "name the column that holds the text."))
    if config.task == TEXT_CLASSIFICATION and not config.label_column.strip():
        problems.append(ConfigProblem("label_column", "name the column that holds each example's class."))
    if config.strategy not in STRATEGIES:
        problems.append(ConfigProblem("strategy", f'unknown strategy "{config.strategy}"; use one of: {", ".join(STRATEGIES)}.'))
    if config.lora_rank is not None and config.task != CAUSAL_LM:
        problems.append(ConfigProblem("lora_rank", f"LoRA is offered for {CAUSAL_LM} here; leave lora_rank at None for {config.task}."))
    return problems


def _number_problems(config: TrainConfig) -> list[ConfigProblem]:
    problems = _positive(config, "max_length", "a positive number of tokens per example")
    problems += _positive(config, "per_core_batch_size", "a positive number of examples per TPU core")
    if config.max_steps is None:
        problems += _positive(config, "epochs", "a positive number of passes over the training data (or set max_steps)")
    else:
        problems += _positive(config, "max_steps", "a positive number of training steps (or None to train by epochs)")
    problems += _positive(config, "learning_rate", "positive, e.g. 5e-5 for fine-tuning a pretrained model")
    if config.lora_rank is not None:
        problems += _positive(config, "lora_rank", "a positive rank, e.g. 8 or 16 (None trains every weight)")
    if config.warmup < 0:
        problems.append(ConfigProblem("warmup", f"must be 0 or more (below 1: a share of the steps; from 1: steps), got {config.warmup}."))
    if config.weight_decay < 0:
        problems.append(ConfigProblem("weight_decay", f"must be 0 or more, e.g. 0.01, got {config.weight_decay}."))
    if config.task == MASKED_LM and not 0 < config.mlm_probability < 1:
        problems.append(
            ConfigProblem(
                "mlm_probability", f"must be between 0 and 1 (the share of tokens masked, usually 0.15), got {config.mlm_probability}."
            )
        )
    if config.eval_split is None and not 0 < config.eval_fraction < 1:
        problems.append(
            ConfigProblem(
                "eval_fraction",
                f"must be between 0 and 1 (the share of training rows held out for evaluation), got {config.eval_fraction}.",
            )
        )
    for name in ("eval_steps", "save_steps", "max_train_samples", "max_eval_samples"):
        if getattr(config, name) is not None:
            problems += _positive(config, name, "positive (or None)")
    problems += _positive(config, "logging_steps", "a positive number of steps between loss reports")
    return problems


def _positive(config: TrainConfig, name: str, what: str) -> list[ConfigProblem]:
    value = getattr(config, name)
    return [] if value > 0 else [ConfigProblem(name, f"must be {what}, got {value}.")]


def _dataset_problems(config: TrainConfig, facts: Facts) -> list[ConfigProblem]:
    dataset = facts.dataset
    if dataset is None:
        return []
    if isinstance(dataset, NotFound):
        return [_dataset_not_found(config, dataset)]
    problems = []
    problems += _column_problem(config, "text_column", config.text_column, dataset)
    if config.text_column in dataset.columns and config.text_column not in dataset.text_columns:
        strings = ", ".join(dataset.text_columns) or "none"
        problems.append(
            ConfigProblem("text_column", f'"{config.text_column}" does not hold text; the columns holding text are: {strings}.')
        )
    if config.task == TEXT_CLASSIFICATION:
        problems += _column_problem(config, "label_column", config.label_column, dataset)
        if dataset.labels is not None:
            problems += _label_problems(config.label_column, dataset.labels)
        global_batch = config.per_core_batch_size * facts.devices
        if 0 < dataset.train_rows < global_batch:
            problems.append(
                ConfigProblem(
                    "per_core_batch_size",
                    f"the training split has {dataset.train_rows} rows, fewer than one global batch of {global_batch} "
                    f"({config.per_core_batch_size} per core x {facts.devices} cores); lower per_core_batch_size or use more data.",
                )
            )
    return problems


def _column_problem(config: TrainConfig, field: str, column: str, dataset: DatasetFacts) -> list[ConfigProblem]:
    if not column.strip() or column in dataset.columns:
        return []
    return [ConfigProblem(field, f'the dataset has no column "{column}"; its columns are: {", ".join(dataset.columns)}.')]


def _label_problems(column: str, labels: LabelFacts) -> list[ConfigProblem]:
    if labels.fractional_example is not None:
        why = f"it holds fractional numbers such as {labels.fractional_example}, and text classification needs classes"
        fix = "Choose a column of class names or integer class ids, or bin the numbers into classes first."
    elif labels.distinct > MAX_CLASSES:
        why = f"it has {labels.distinct} distinct values (more than {MAX_CLASSES}), so it looks like an id, a score or a text"
        fix = "Choose the column that holds each example's class."
    elif labels.distinct < 2:
        why = f"it has {labels.distinct} distinct value{'s' if labels.distinct != 1 else ''} ({', '.join(labels.examples) or 'empty'}); a classifier needs at least 2 classes"
        fix = "Choose the column that holds each example's class, or a split that has more than one."
    else:
        return []
    return [ConfigProblem("label_column", f'"{column}" is not categorical: {why}. {fix}')]


def _dataset_not_found(config: TrainConfig, missing: NotFound) -> ConfigProblem:
    name = config.dataset
    field = missing.field or "dataset"
    if missing.reason == "no_such_path":
        return ConfigProblem(
            field, f'no file "{missing.detail or name}" on this machine; check the path, or use "demo" (built-in sentiment sentences).'
        )
    if missing.reason == "offline":
        return ConfigProblem(
            field,
            f'"{name}" is not in the local datasets cache and the Hugging Face Hub cannot be reached ({missing.detail}). '
            f'Give a local data file instead ({_READABLE_FORMATS}), or use "demo" (built-in sentiment sentences). '
            "If the dataset is in the cache, set HF_HUB_OFFLINE=1 before importing datasets.",
        )
    if missing.reason == "not_on_hub":
        return ConfigProblem(
            field, f'no dataset "{name}" on the Hugging Face Hub; check the spelling (ids look like "org/name"), or give a local data file.'
        )
    return ConfigProblem(field, f'cannot load "{name}": {missing.detail}')


def _model_problems(config: TrainConfig, facts: Facts) -> list[ConfigProblem]:
    model = facts.model
    if model is None:
        return []
    if isinstance(model, NotFound):
        return [_model_not_found(config, model, facts.local_models)]
    problems = []
    if model.position_limit is not None and config.max_length > model.position_limit:
        problems.append(
            ConfigProblem(
                "max_length",
                f"{config.max_length} is above the model's limit of {model.position_limit} positions "
                f"({model.limit_name}); use {model.position_limit} or less.",
            )
        )
    if config.lora_rank is not None and config.task == CAUSAL_LM and not model.lora_targets_known:
        problems.append(
            ConfigProblem(
                "lora_rank",
                f'peft does not know which layers of a "{model.model_type}" model to adapt; train every weight (lora_rank None), '
                "or use a model of a common architecture (Llama, Gemma, Qwen, GPT-2).",
            )
        )
    if config.task == MASKED_LM and not model.has_mask_token:
        problems.append(
            ConfigProblem(
                "model",
                f'"{config.model}" has no mask token, so it cannot do masked-lm; use causal-lm with it, or a masked model such as BERT or RoBERTa.',
            )
        )
    return problems


def _model_not_found(config: TrainConfig, missing: NotFound, local_models: tuple[str, ...]) -> ConfigProblem:
    name = config.model
    found = ", ".join(local_models) if local_models else "none found"
    if missing.reason == "no_such_path":
        return ConfigProblem(
            "model",
            f'no model directory "{missing.detail or name}" on this machine; give a directory with config.json and weights, or one of the models found here: {found}.',
        )
    if missing.reason == "offline":
        return ConfigProblem(
            "model",
            f'"{name}" is not on this machine and the Hugging Face Hub cannot be reached ({missing.detail}). '
            "Download it where there is network and give its local directory (with config.json and weights), "
            f"or use a model found on this machine: {found}.",
        )
    if missing.reason == "not_on_hub":
        return ConfigProblem(
            "model",
            f'no model "{name}" on the Hugging Face Hub; check the spelling (ids look like "org/name"), or give a local model directory.',
        )
    return ConfigProblem("model", f'cannot load "{name}": {missing.detail}')
