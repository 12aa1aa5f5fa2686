"""Accuracy, macro-F1 and perplexity, computed locally."""

from __future__ import annotations

import math

import numpy as np
from transformers import EvalPrediction

from tpu_nb.recipes.metrics import accuracy, classification_metrics, macro_f1, perplexity, with_perplexity


def test_accuracy() -> None:
    assert accuracy(np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0])) == 0.75
    assert accuracy(np.array([]), np.array([])) == 0.0


def test_macro_f1_averages_classes_equally() -> None:
    predictions = np.array([0, 0, 0, 0, 1, 1])
    labels = np.array([0, 0, 0, 1, 1, 2])
    # class 0: P 3/4, R 1 -> 6/7; class 1: P 1/2, R 1/2 -> 1/2; class 2: never predicted -> 0
    assert math.isclose(macro_f1(predictions, labels, 3), (6 / 7 + 1 / 2 + 0) / 3)
    assert macro_f1(np.array([0, 0]), np.array([0, 0]), 2) == 0.5  # the absent class counts as 0


def test_a_constant_classifier_scores_well_on_accuracy_but_not_f1() -> None:
    labels = np.array([0] * 9 + [1])
    predictions = np.zeros(10, dtype=int)
    assert accuracy(predictions, labels) == 0.9
    assert math.isclose(macro_f1(predictions, labels, 2), (18 / 19) / 2)


def test_classification_metrics_from_logits() -> None:
    logits = np.array([[2.0, -1.0], [0.1, 0.3], [0.0, 1.0]])
    compute = classification_metrics(2)
    assert compute(EvalPrediction(predictions=logits, label_ids=np.array([0, 1, 0]))) == {"accuracy": 2 / 3, "macro_f1": 2 / 3}


def test_perplexity() -> None:
    assert math.isclose(perplexity(math.log(20.0)), 20.0)
    assert perplexity(10_000.0) == math.inf
    assert with_perplexity({"eval_loss": 0.0, "epoch": 1.0}) == {"eval_loss": 0.0, "epoch": 1.0, "eval_perplexity": 1.0}
    assert with_perplexity({"epoch": 1.0}) == {"epoch": 1.0}
