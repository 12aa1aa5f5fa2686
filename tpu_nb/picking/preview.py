"""What a configuration will train on, before training: examples as tokens, classes, steps, padding.

The logic (`make_preview`) loads the data and the tokenizer in the kernel
(never the model, never XLA); `preview_html` renders its result.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpu_nb.recipes.config import TEXT_CLASSIFICATION, TrainConfig

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase

SHOWN_EXAMPLES = 3
SHOWN_TOKENS = 40
SAMPLE_ROWS = 1000
"""Lengths (padding, truncation, tokens per row) are measured on this many training rows."""


@dataclass(frozen=True, slots=True)
class TokenizedExample:
    text: str
    label: str | None
    tokens: tuple[str, ...]
    """The first SHOWN_TOKENS tokens the model sees, padding excluded."""
    length: int
    """Tokens before truncation, special tokens included."""


@dataclass(frozen=True, slots=True)
class Preview:
    examples: tuple[TokenizedExample, ...]
    label_counts: dict[str, int] | None
    train_rows: int
    train_units: int
    """Training examples (classification) or estimated blocks of max_length tokens (language modelling)."""
    devices: int
    per_core_batch_size: int
    steps_per_epoch: int
    total_steps: int
    padding_share: float
    """Share of the tokens fed to the model that are padding."""
    truncated_share: float
    """Share of examples longer than max_length (cut)."""
    max_length: int
    packed: bool
    """Language modelling packs texts into blocks: no padding, no truncation."""

    @property
    def global_batch(self) -> int:
        return self.per_core_batch_size * self.devices


def make_preview(config: TrainConfig, devices: int) -> Preview:
    """Load the training rows and the tokenizer and measure what training will see."""
    from tpu_nb.recipes.data import load_splits, usable_rows
    from tpu_nb.recipes.labels import label_counts, label_names
    from tpu_nb.recipes.models import load_tokenizer

    train = usable_rows(load_splits(config).train, config)
    tokenizer = load_tokenizer(config)
    sample = train.select(range(min(SAMPLE_ROWS, len(train))))
    texts = list(sample[config.text_column])
    lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]
    classification = config.task == TEXT_CLASSIFICATION
    names = label_names(train, config.label_column) if classification else ()
    examples = tuple(_example(sample, index, tokenizer, config, names, lengths[index]) for index in range(min(SHOWN_EXAMPLES, len(sample))))
    if classification:
        units = len(train)
    else:
        # Packing concatenates every text, so blocks = all tokens / max_length; measured on the sample.
        tokens_per_row = sum(lengths) / len(lengths) if lengths else 0.0
        units = int(tokens_per_row * len(train)) // config.max_length
    steps_per_epoch = units // (config.per_core_batch_size * devices)
    total_steps = config.max_steps if config.max_steps is not None else math.ceil(config.epochs * steps_per_epoch)
    return Preview(
        examples=examples,
        label_counts=label_counts(train, config.label_column, names) if classification else None,
        train_rows=len(train),
        train_units=units,
        devices=devices,
        per_core_batch_size=config.per_core_batch_size,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        padding_share=padding_share(lengths, config.max_length) if classification else 0.0,
        truncated_share=(sum(length > config.max_length for length in lengths) / len(lengths)) if classification and lengths else 0.0,
        max_length=config.max_length,
        packed=not classification,
    )


def padding_share(lengths: list[int], max_length: int) -> float:
    """The share of pad tokens when every example is padded (or cut) to `max_length`."""
    if not lengths or max_length <= 0:
        return 0.0
    padding = sum(max(0, max_length - length) for length in lengths)
    return padding / (len(lengths) * max_length)


def _example(
    sample: Dataset, index: int, tokenizer: PreTrainedTokenizerBase, config: TrainConfig, names: tuple[str, ...], length: int
) -> TokenizedExample:
    from datasets import ClassLabel

    from tpu_nb.recipes.labels import label_text

    row = sample[index]
    ids = tokenizer(row[config.text_column], truncation=True, max_length=config.max_length)["input_ids"]
    tokens = tuple(tokenizer.convert_ids_to_tokens(ids[:SHOWN_TOKENS]))
    label = None
    if names:
        value = row[config.label_column]
        label = names[value] if isinstance(sample.features[config.label_column], ClassLabel) else label_text(value)
    return TokenizedExample(str(row[config.text_column]), label, tokens, length)


def preview_html(preview: Preview) -> str:
    unit = "blocks" if preview.packed else "examples"
    estimate = "about " if preview.packed else ""
    parts = [
        "<b>Steps</b>",
        (
            f"<div>{estimate}{preview.train_units:,} training {unit} ({preview.train_rows:,} rows); global batch {preview.global_batch} "
            f"= {preview.per_core_batch_size} per core x {preview.devices} TPU core{'s' if preview.devices != 1 else ''}: "
            f"<b>{preview.steps_per_epoch:,} steps per epoch</b>, {preview.total_steps:,} steps in all.</div>"
        ),
        "<b>Padding</b>",
        _padding_html(preview),
    ]
    if preview.label_counts is not None:
        parts += ["<b>Classes</b>", _counts_html(preview.label_counts)]
    parts += ["<b>Examples as the model sees them</b>", *(_example_html(example) for example in preview.examples)]
    return "<div style='line-height:1.5'>" + "".join(parts) + "</div>"


def _padding_html(preview: Preview) -> str:
    if preview.packed:
        return f"<div>none: texts are packed into blocks of {preview.max_length} tokens.</div>"
    return (
        f"<div>{preview.padding_share:.0%} of the tokens at max_length {preview.max_length} are padding; "
        f"{preview.truncated_share:.0%} of the examples are longer and get cut.</div>"
    )


def _counts_html(counts: dict[str, int]) -> str:
    total = sum(counts.values()) or 1
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td style='text-align:right'>{count:,}</td>"
        f"<td><div style='background:#1565c0;height:0.8em;width:{200 * count // total}px'></div></td></tr>"
        for name, count in counts.items()
    )
    return f"<table>{rows}</table>"


def _example_html(example: TokenizedExample) -> str:
    label = f" &rarr; <b>{html.escape(example.label)}</b>" if example.label is not None else ""
    more = " ..." if example.length > len(example.tokens) else ""
    tokens = " ".join(f"<code>{html.escape(token)}</code>" for token in example.tokens)
    return f"<div>{html.escape(example.text)}{label}<br>{example.length} tokens: {tokens}{more}</div>"
