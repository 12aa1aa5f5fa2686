"""Class names and ids from a label column, and what validation is told about it."""

from __future__ import annotations

from datasets import ClassLabel, Dataset, Features, Value

from tpu_nb.recipes import LabelFacts
from tpu_nb.recipes.labels import label_counts, label_facts, label_names, label_text


def test_label_text_treats_whole_floats_as_integers() -> None:
    assert [label_text(value) for value in (1, 1.0, 2.5, "pos", True)] == ["1", "1", "2.5", "pos", "True"]


def test_names_follow_a_class_label_else_sorted_values() -> None:
    classes = Dataset.from_dict({"label": [1, 0]}, features=Features({"label": ClassLabel(names=["neg", "pos"])}))
    assert label_names(classes, "label") == ("neg", "pos")
    numbers = Dataset.from_dict({"label": [10, 2, None, 2]})
    assert label_names(numbers, "label") == ("2", "10")  # numerically, not as text
    words = Dataset.from_dict({"label": ["pos", "neg", "neutral"]})
    assert label_names(words, "label") == ("neg", "neutral", "pos")


def test_facts_about_a_label_column() -> None:
    scores = Dataset.from_dict({"score": [0.5, 1.0, 0.25]})
    facts = label_facts(scores, "score")
    assert facts.distinct == 3 and facts.fractional_example in ("0.5", "0.25")
    assert label_facts(Dataset.from_dict({"label": [1.0, 0.0, 1.0]}), "label") == LabelFacts(2, ("1", "0"))


def test_counts_per_class_skip_unlabelled_rows() -> None:
    classes = Dataset.from_dict({"label": [1, 0, 1, -1]}, features=Features({"label": ClassLabel(names=["neg", "pos"])}))
    assert label_counts(classes, "label", ("neg", "pos")) == {"neg": 1, "pos": 2}
    words = Dataset.from_dict({"label": ["b", "a", "b"]}, features=Features({"label": Value("string")}))
    assert label_counts(words, "label", ("a", "b")) == {"a": 1, "b": 2}
