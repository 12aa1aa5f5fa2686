"""The built-in demo dataset: deterministic, balanced, labelled, and not given away by one word."""

from __future__ import annotations

import re
from collections import Counter

from tpu_nb.recipes.demo_data import LABELS, NEGATIVE, POSITIVE, TRAIN_ROWS, VALIDATION_ROWS, demo_dataset, demo_examples


def test_the_same_seed_gives_the_same_sentences() -> None:
    assert demo_examples(50, seed=3) == demo_examples(50, seed=3)
    assert demo_examples(50, seed=3) != demo_examples(50, seed=4)


def test_labels_are_balanced_and_sentences_varied() -> None:
    examples = demo_examples(4000)
    share = sum(label for _, label in examples) / len(examples)
    assert 0.45 < share < 0.55
    assert len({text for text, _ in examples}) > 3500


def test_negations_flip_the_adjective() -> None:
    examples = dict(demo_examples(4000))
    negated_negative = [text for text in examples if re.fullmatch(r"([\w ]+, )?the [\w ]+ was not (boring|dull|awful|bad)\.", text)]
    assert negated_negative and all(examples[text] == POSITIVE for text in negated_negative)
    contrasts = [
        text for text in examples if re.fullmatch(r"([\w ]+, )?the [\w ]+ was (great|superb), but the [\w ]+ was (dull|awful)\.", text)
    ]
    assert contrasts and all(examples[text] == NEGATIVE for text in contrasts)


def test_no_single_word_gives_the_label_away() -> None:
    examples = demo_examples(4000)
    words = Counter(word for text, _ in examples for word in set(re.findall(r"[a-z']+", text)))
    for word in words:
        agree = sum((word in re.findall(r"[a-z']+", text)) == bool(label) for text, label in examples) / len(examples)
        assert max(agree, 1 - agree) < 0.65, word


def test_the_dataset_has_train_and_validation_splits_with_class_names() -> None:
    dataset = demo_dataset()
    assert (len(dataset["train"]), len(dataset["validation"])) == (TRAIN_ROWS, VALIDATION_ROWS)
    assert dataset["train"].features["label"].names == list(LABELS) == ["negative", "positive"]
    assert dataset["train"][0] == {"text": demo_examples(1)[0][0], "label": demo_examples(1)[0][1]}
    assert set(dataset["validation"]["text"]) != set(dataset["train"]["text"][:VALIDATION_ROWS])
