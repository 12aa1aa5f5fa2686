"""Loading a dataset's training and evaluation rows, and tokenizing them to static shapes.

XLA compiles one graph per input shape. Classification pads every example to
`max_length`; language modelling packs the texts into blocks of `max_length`
tokens (run_mlm's `group_texts`). With `dataloader_drop_last=True` every
batch then has the same shape and the graph compiles a handful of times.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpu_nb.recipes.config import CAUSAL_LM, MASKED_LM, TEXT_CLASSIFICATION, TrainConfig
from tpu_nb.recipes.demo_data import demo_dataset
from tpu_nb.recipes.hub import hub_unreachable_reason, offline_mode
from tpu_nb.recipes.labels import label_text
from tpu_nb.recipes.sources import dataset_kind, file_builder, looks_like_path
from tpu_nb.recipes.validation import NotFound, NotFoundReason

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict
    from transformers import PreTrainedTokenizerBase

VALIDATION_SPLIT = "validation"
_EVAL_FILE_SPLIT = "eval"


class DataSourceError(Exception):
    """The dataset could not be loaded; `not_found` says why, for validation's message."""

    def __init__(self, not_found: NotFound) -> None:
        super().__init__(not_found.detail or not_found.reason)
        self.not_found = not_found


@dataclass(frozen=True, slots=True)
class Splits:
    """Rows as loaded, before tokenizing."""

    train: Dataset
    eval: Dataset


def load_splits(config: TrainConfig) -> Splits:
    """The training and evaluation rows, limited to `max_train_samples`/`max_eval_samples`.

    Raises DataSourceError when the dataset, a file or a split cannot be found.
    """
    splits = _load_all(config)
    train = _split(splits, config.train_split, "train_split")
    if config.eval_split is not None:
        eval_name = _EVAL_FILE_SPLIT if dataset_kind(config.dataset) == "file" else config.eval_split
        evaluation = _split(splits, eval_name, "eval_split")
    elif VALIDATION_SPLIT in splits:
        evaluation = splits[VALIDATION_SPLIT]
    else:
        held_out = train.train_test_split(test_size=config.eval_fraction, seed=config.seed)
        train, evaluation = held_out["train"], held_out["test"]
    return Splits(_limit(train, config.max_train_samples, config.seed), _limit(evaluation, config.max_eval_samples, config.seed))


def _split(splits: DatasetDict, name: str, field: str) -> Dataset:
    if name not in splits:
        available = ", ".join(splits)
        raise DataSourceError(NotFound("unreadable", f'it has no split "{name}"; its splits are: {available}.', field=field))
    return splits[name]


def _limit(rows: Dataset, limit: int | None, seed: int) -> Dataset:
    # Shuffle first: many datasets are sorted by label, so their first rows are one class.
    if limit is None or limit >= len(rows):
        return rows
    return rows.shuffle(seed=seed).select(range(limit))


def _load_all(config: TrainConfig) -> DatasetDict:
    kind = dataset_kind(config.dataset)
    if kind == "demo":
        return _cached_demo()
    if kind == "file":
        train_file = _existing_file(config.dataset, "dataset")
        eval_file = None
        if config.eval_split is not None:
            if not looks_like_path(config.eval_split):
                raise DataSourceError(
                    NotFound(
                        "unreadable",
                        "for a file dataset, eval_split must be another file (or None to hold out eval_fraction).",
                        field="eval_split",
                    )
                )
            eval_file = _existing_file(config.eval_split, "eval_split")
        return _cached_files(train_file, eval_file, _modified(train_file), _modified(eval_file))
    return _load_hub(config.dataset, config.dataset_config)


def _existing_file(name: str, field: str) -> str:
    path = Path(name).expanduser().absolute()
    if not path.is_file():
        raise DataSourceError(NotFound("no_such_path", str(path), field=field))
    if file_builder(str(path)) is None:
        raise DataSourceError(NotFound("unreadable", f'cannot read "{path.suffix}" files.', field=field))
    return str(path)


def _modified(path: str | None) -> float | None:
    return None if path is None else os.path.getmtime(path)


@functools.lru_cache(maxsize=1)
def _cached_demo() -> DatasetDict:
    return demo_dataset()


# The picker loads the same dataset again on every change: keep the last few.
# The modification times are part of the key, so an edited file is read again.
@functools.lru_cache(maxsize=4)
def _cached_files(train_file: str, eval_file: str | None, train_mtime: float | None, eval_mtime: float | None) -> DatasetDict:
    from datasets import load_dataset

    builder = file_builder(train_file)
    data_files = {"train": train_file} if eval_file is None else {"train": train_file, _EVAL_FILE_SPLIT: eval_file}
    options: dict[str, Any] = {"delimiter": "\t"} if train_file.lower().endswith(".tsv") else {}
    try:
        return load_dataset(builder, data_files=data_files, **options)
    except (ValueError, OSError) as error:  # the readers' own parse errors name the problem
        raise DataSourceError(NotFound("unreadable", f"{type(error).__name__}: {error}")) from error


@functools.lru_cache(maxsize=4)
def _load_hub(name: str, config_name: str | None) -> DatasetDict:
    from datasets import load_dataset

    unreachable = hub_unreachable_reason()
    if unreachable is not None and not offline_mode():
        # Only in offline mode does `datasets` go straight to its cache; otherwise it retries for ~23 s.
        raise DataSourceError(NotFound("offline", unreachable))
    try:
        return load_dataset(name, config_name)
    except FileNotFoundError as error:  # includes datasets' DatasetNotFoundError
        reason: NotFoundReason = "offline" if unreachable is not None else "not_on_hub"
        raise DataSourceError(NotFound(reason, unreachable or str(error))) from error
    except ConnectionError as error:
        raise DataSourceError(NotFound("offline", unreachable or str(error))) from error
    except (ValueError, OSError) as error:  # e.g. a missing config name: datasets' message lists the choices
        raise DataSourceError(NotFound("unreadable", str(error))) from error


def usable_rows(rows: Dataset, config: TrainConfig) -> Dataset:
    """The rows with a text and, for classification, a label (GLUE-style test splits mark unlabelled rows -1)."""
    from datasets import ClassLabel

    text, label = config.text_column, config.label_column
    if config.task != TEXT_CLASSIFICATION:
        return rows.filter(lambda row: row[text] is not None, desc="Dropping empty rows")
    is_class_label = isinstance(rows.features[label], ClassLabel)
    return rows.filter(
        lambda row: row[text] is not None and row[label] is not None and not (is_class_label and row[label] < 0),
        desc="Dropping unlabelled rows",
    )


def tokenize_for_classification(
    rows: Dataset, tokenizer: PreTrainedTokenizerBase, config: TrainConfig, label_ids: dict[str, int]
) -> Dataset:
    """input_ids/attention_mask padded to exactly `max_length`, and integer `labels`."""
    from datasets import ClassLabel

    # A ClassLabel column already holds the ids (label_ids follows its names).
    is_class_label = isinstance(rows.features[config.label_column], ClassLabel)

    def encode(batch: dict[str, list[Any]]) -> dict[str, Any]:
        encoded = dict(tokenizer(batch[config.text_column], padding="max_length", truncation=True, max_length=config.max_length))
        values = batch[config.label_column]
        encoded["labels"] = list(values) if is_class_label else [label_ids[label_text(value)] for value in values]
        return encoded

    return rows.map(encode, batched=True, remove_columns=rows.column_names, desc="Tokenizing")


def tokenize_for_language_modelling(rows: Dataset, tokenizer: PreTrainedTokenizerBase, config: TrainConfig) -> Dataset:
    """Texts tokenized and packed into blocks of `max_length` tokens; causal LM blocks carry `labels`."""
    masked = config.task == MASKED_LM

    def encode(batch: dict[str, list[Any]]) -> dict[str, Any]:
        # Special-token masks let the MLM collator avoid masking [CLS]/[SEP].
        return dict(tokenizer(batch[config.text_column], return_special_tokens_mask=masked))

    tokenized = rows.map(encode, batched=True, remove_columns=rows.column_names, desc="Tokenizing")
    pack: Callable[[dict[str, list[list[int]]]], dict[str, list[list[int]]]] = functools.partial(
        group_texts, block_size=config.max_length, with_labels=config.task == CAUSAL_LM
    )
    return tokenized.map(pack, batched=True, desc=f"Packing into blocks of {config.max_length}")


def group_texts(examples: dict[str, list[list[int]]], block_size: int, with_labels: bool = False) -> dict[str, list[list[int]]]:
    """Concatenate a batch of token lists and cut it into `block_size` blocks, dropping the remainder."""
    concatenated = {key: list(chain.from_iterable(values)) for key, values in examples.items()}
    total = len(next(iter(concatenated.values()), []))
    total -= total % block_size
    blocks = {key: [tokens[start : start + block_size] for start in range(0, total, block_size)] for key, tokens in concatenated.items()}
    if with_labels:
        blocks["labels"] = [list(block) for block in blocks["input_ids"]]
    return blocks
