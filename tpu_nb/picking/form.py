"""The picker's form as plain values: per-task defaults, suggestions, and the TrainConfig it stands for.

Pure logic (no widgets): the widgets in `tpu_nb.picking.widget` hold these
values and show what this module decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from tpu_nb.recipes.config import CAUSAL_LM, DEMO_DATASET, MASKED_LM, TEXT_CLASSIFICATION, TrainConfig
from tpu_nb.recipes.sources import DATA_FILE_BUILDERS, display_path

# Widgets cannot hold None: these optional fields show 0 (numbers) or "" (text) for None.
OPTIONAL_NUMBERS = ("max_steps", "eval_steps", "save_steps", "max_train_samples", "max_eval_samples", "lora_rank")
OPTIONAL_TEXTS = ("dataset_config", "eval_split")

# Small and mid-sized models with standard attention: static shapes, quick compiles, fit one TPU core.
SUGGESTED_MODELS = {
    TEXT_CLASSIFICATION: (
        "distilbert/distilbert-base-uncased",
        "google-bert/bert-base-uncased",
        "FacebookAI/roberta-base",
        "google/electra-small-discriminator",
    ),
    MASKED_LM: ("distilbert/distilroberta-base", "google-bert/bert-base-uncased", "FacebookAI/roberta-base"),
    CAUSAL_LM: ("openai-community/gpt2", "distilbert/distilgpt2", "EleutherAI/pythia-160m", "HuggingFaceTB/SmolLM2-135M"),
}
SUGGESTED_DATASETS = (DEMO_DATASET, "stanfordnlp/imdb", "nyu-mll/glue", "Salesforce/wikitext")

# The hyperparameters whose defaults depend on the task: the form resets them when the task changes.
PER_TASK_FIELDS = ("max_length", "per_core_batch_size", "learning_rate", "epochs", "warmup")

_TEXT_NAMES = ("text", "sentence", "review", "content", "document", "prompt", "question")
_LABEL_NAMES = ("label", "labels", "class", "category", "sentiment", "target")


def default_config(task: str, local_models: Iterable[str] = ()) -> TrainConfig:
    """The form's starting point for `task`: a model found on this machine if any (works offline), the demo data."""
    models = (*local_models, *SUGGESTED_MODELS.get(task, ()))
    return TrainConfig.for_task(task, models[0] if models else "")


def model_options(task: str, local_models: Iterable[str]) -> tuple[str, ...]:
    """Models to offer: those on this machine first, then the suggestions for the task."""
    return tuple(dict.fromkeys((*local_models, *SUGGESTED_MODELS.get(task, ()))))


def form_values(config: TrainConfig) -> dict[str, Any]:
    """What each widget shows for `config` (None as 0 or "")."""
    values = {field.name: getattr(config, field.name) for field in fields(config)}
    for name in OPTIONAL_NUMBERS:
        values[name] = values[name] or 0
    for name in OPTIONAL_TEXTS:
        values[name] = values[name] or ""
    return values


def config_from_form(values: Mapping[str, Any]) -> TrainConfig:
    """The TrainConfig the widgets' values stand for (0 or "" in an optional field means None)."""
    settings = dict(values)
    for name in OPTIONAL_NUMBERS:
        settings[name] = settings[name] or None
    for name in OPTIONAL_TEXTS:
        settings[name] = str(settings[name]).strip() or None
    for name in ("model", "dataset", "output_dir", "train_split", "text_column", "label_column"):
        settings[name] = str(settings[name]).strip()
    return TrainConfig(**settings)


def guess_text_column(columns: tuple[str, ...], text_columns: tuple[str, ...]) -> str | None:
    return _first_named(text_columns, _TEXT_NAMES) or (text_columns[0] if text_columns else None)


def guess_label_column(columns: tuple[str, ...], text_columns: tuple[str, ...]) -> str | None:
    others = tuple(column for column in columns if column not in text_columns)
    return _first_named(columns, _LABEL_NAMES) or (others[0] if others else None)


def _first_named(columns: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    by_name = {column.lower(): column for column in columns}
    return next((by_name[name] for name in names if name in by_name), None)


def save_upload(name: str, content: bytes, directory: Path) -> Path:
    """Write an uploaded file under `directory`, keeping only a safe base name (no paths from the browser)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name).lstrip(".") or "upload"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / safe
    path.write_bytes(content)
    return path


def data_files_in(directory: Path) -> tuple[str, ...]:
    """Readable data files directly in `directory`, spelled for the dataset box ("./data.csv")."""
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return ()
    return tuple(display_path(entry) for entry in entries if entry.is_file() and entry.suffix.lower() in DATA_FILE_BUILDERS)
