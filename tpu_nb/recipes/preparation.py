"""`prepare(config)`: everything that happens in the notebook before the TPU workers start.

Tokenizer, model (on the CPU) and tokenized data are loaded here once and
reach the forked workers copy-on-write. Nothing here touches an XLA device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tpu_nb.recipes.config import TEXT_CLASSIFICATION, TrainConfig
from tpu_nb.recipes.data import load_splits, tokenize_for_classification, tokenize_for_language_modelling, usable_rows
from tpu_nb.recipes.facts import check
from tpu_nb.recipes.labels import label_names, label_text
from tpu_nb.recipes.models import load_model, load_tokenizer
from tpu_nb.recipes.training import FineTuning
from tpu_nb.recipes.validation import ConfigProblem

if TYPE_CHECKING:
    from datasets import Dataset


class InvalidConfig(ValueError):
    """The configuration cannot be prepared; `problems` lists every reason, each with its fix."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("the configuration has problems:\n" + "\n".join(f"- {problem}" for problem in self.problems))


def prepare(config: TrainConfig) -> FineTuning:
    """Validate `config`, load its tokenizer and model, and tokenize its data; raises InvalidConfig."""
    from tpu_nb.runtime import detect

    problems = check(config)
    if problems:
        raise InvalidConfig(problems)
    splits = load_splits(config)
    train_rows, eval_rows = usable_rows(splits.train, config), usable_rows(splits.eval, config)
    tokenizer = load_tokenizer(config)
    labels: tuple[str, ...] = ()
    if config.task == TEXT_CLASSIFICATION:
        labels = label_names(train_rows, config.label_column)
        _check_eval_labels(eval_rows, config, labels)
        label_ids = {name: index for index, name in enumerate(labels)}
        model = load_model(config, tokenizer, labels)
        train = tokenize_for_classification(train_rows, tokenizer, config, label_ids)
        evaluation = tokenize_for_classification(eval_rows, tokenizer, config, label_ids)
    else:
        model = load_model(config, tokenizer)
        train = tokenize_for_language_modelling(train_rows, tokenizer, config)
        evaluation = tokenize_for_language_modelling(eval_rows, tokenizer, config)
    problems = batch_problems(config, train, evaluation, detect().devices)
    if problems:
        raise InvalidConfig(problems)
    return FineTuning(config, tokenizer, model, train, evaluation, labels)


def batch_problems(config: TrainConfig, train: Dataset, evaluation: Dataset, devices: int) -> list[ConfigProblem]:
    """Splits too small for one global batch: with drop_last they would give no step at all."""
    global_batch = config.per_core_batch_size * devices
    unit = "examples" if config.task == TEXT_CLASSIFICATION else f"blocks of {config.max_length} tokens"
    batch = f"one global batch of {global_batch} ({config.per_core_batch_size} per core x {devices} cores)"
    problems = []
    if len(train) < global_batch:
        problems.append(
            ConfigProblem(
                "per_core_batch_size",
                f"training has {len(train)} {unit}, fewer than {batch}; lower per_core_batch_size or max_length, or use more data.",
            )
        )
    if len(evaluation) < global_batch:
        field = "max_eval_samples" if config.max_eval_samples is not None else "eval_fraction"
        problems.append(
            ConfigProblem(
                field, f"evaluation has {len(evaluation)} {unit}, fewer than {batch}; evaluate on more rows or lower per_core_batch_size."
            )
        )
    return problems


def _check_eval_labels(evaluation: Dataset, config: TrainConfig, labels: tuple[str, ...]) -> None:
    from datasets import ClassLabel

    if isinstance(evaluation.features[config.label_column], ClassLabel):
        return
    unseen = sorted({label_text(value) for value in evaluation.unique(config.label_column)} - set(labels))
    if unseen:
        raise InvalidConfig(
            [
                ConfigProblem(
                    "eval_split",
                    f"evaluation has labels the training rows never have: {', '.join(unseen[:10])}; evaluate on a split with the same classes.",
                )
            ]
        )
