"""The preview: examples as tokens, classes, steps per epoch for the cores there are, padding waste."""

from __future__ import annotations

from pathlib import Path

import pytest
from recipes.recipe_support import xla_runtime_started

from tpu_nb.picking.preview import make_preview, padding_share, preview_html
from tpu_nb.recipes import TrainConfig


def test_padding_share() -> None:
    assert padding_share([4, 8, 12], max_length=8) == pytest.approx((4 + 0 + 0) / 24)
    assert padding_share([], max_length=8) == 0.0


def test_classification_preview_of_the_demo_on_four_cores(tiny_bert: Path) -> None:
    preview = make_preview(TrainConfig(model=str(tiny_bert), max_length=32, per_core_batch_size=16, epochs=2.0), devices=4)
    assert (preview.train_units, preview.global_batch, preview.steps_per_epoch, preview.total_steps) == (4000, 64, 62, 124)
    assert preview.label_counts is not None and set(preview.label_counts) == {"negative", "positive"}
    assert sum(preview.label_counts.values()) == 4000
    first = preview.examples[0]
    assert first.label in ("negative", "positive")
    assert first.tokens[0] == "[CLS]" and first.tokens[-1] == "[SEP]" and first.length == len(first.tokens)
    assert 0.5 < preview.padding_share < 0.8 and preview.truncated_share == 0.0  # short sentences, 32 tokens
    text = preview_html(preview)
    assert "global batch 64 = 16 per core x 4 TPU cores: <b>62 steps per epoch</b>, 124 steps in all." in text
    assert f"{preview.padding_share:.0%} of the tokens at max_length 32 are padding" in text
    assert "<code>[CLS]</code>" in text and "&rarr; <b>" in text
    assert not xla_runtime_started()


def test_truncation_is_counted(tiny_bert: Path) -> None:
    preview = make_preview(TrainConfig(model=str(tiny_bert), max_length=8, max_steps=10), devices=1)
    assert preview.truncated_share > 0.5 and preview.total_steps == 10


def test_language_modelling_packs_texts(tiny_bert: Path) -> None:
    preview = make_preview(TrainConfig(model=str(tiny_bert), task="masked-lm", max_length=32, per_core_batch_size=8), devices=1)
    assert preview.packed and preview.label_counts is None and preview.padding_share == 0.0
    assert 1000 < preview.train_units < 2000  # about 13 tokens a sentence, 4000 sentences, 32 a block
    assert preview.steps_per_epoch == preview.train_units // 8
    assert "none: texts are packed into blocks of 32 tokens." in preview_html(preview)
