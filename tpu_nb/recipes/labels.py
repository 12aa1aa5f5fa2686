"""Class labels of a text-classification dataset: their names, ids and what the column holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpu_nb.recipes.validation import LabelFacts

if TYPE_CHECKING:
    from datasets import Dataset

_EXAMPLES = 5


def label_text(value: Any) -> str:
    """A label value as a class name: 1 and 1.0 (CSV columns with gaps become floats) are both "1"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def label_names(train: Dataset, column: str) -> tuple[str, ...]:
    """The class names, in id order: a ClassLabel's own names, else the distinct values sorted."""
    from datasets import ClassLabel

    feature = train.features[column]
    if isinstance(feature, ClassLabel):
        return tuple(feature.names)
    values = [value for value in train.unique(column) if value is not None]
    numbers = all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values)
    return tuple(label_text(value) for value in sorted(values, key=float if numbers else str))


def label_facts(train: Dataset, column: str) -> LabelFacts:
    """What validation needs to decide whether `column` is a set of classes."""
    from datasets import ClassLabel

    feature = train.features[column]
    if isinstance(feature, ClassLabel):
        return LabelFacts(len(feature.names), tuple(feature.names[:_EXAMPLES]))
    values = [value for value in train.unique(column) if value is not None]
    fractional = next((value for value in values if isinstance(value, float) and not value.is_integer()), None)
    examples = tuple(label_text(value) for value in values[:_EXAMPLES])
    return LabelFacts(len(values), examples, None if fractional is None else repr(fractional))


def label_counts(train: Dataset, column: str, names: tuple[str, ...]) -> dict[str, int]:
    """How many training rows each class has, in class order."""
    from datasets import ClassLabel

    counts = dict.fromkeys(names, 0)
    is_class_label = isinstance(train.features[column], ClassLabel)
    for value in train[column]:
        if value is None or (is_class_label and value < 0):
            continue  # unlabelled rows (ClassLabel -1, as in GLUE's test splits)
        name = names[value] if is_class_label else label_text(value)
        counts[name] = counts.get(name, 0) + 1
    return counts
