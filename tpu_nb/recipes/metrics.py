"""Evaluation metrics computed locally with numpy (the `evaluate` library would download them)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(predictions == labels)) if labels.size else 0.0


def macro_f1(predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """The unweighted mean of each class's F1 (a class absent from both counts as 0, as in scikit-learn)."""
    scores = []
    for label in range(num_classes):
        true_positive = np.sum((predictions == label) & (labels == label))
        predicted = np.sum(predictions == label)
        actual = np.sum(labels == label)
        scores.append(0.0 if predicted + actual == 0 else 2.0 * true_positive / (predicted + actual))
    return float(np.mean(scores)) if scores else 0.0


def classification_metrics(num_classes: int) -> Any:
    """A Trainer `compute_metrics` giving accuracy and macro-F1 from logits."""

    def compute(prediction: Any) -> dict[str, float]:
        logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        predicted = np.argmax(logits, axis=-1)
        labels = np.asarray(prediction.label_ids)
        return {"accuracy": accuracy(predicted, labels), "macro_f1": macro_f1(predicted, labels, num_classes)}

    return compute


def perplexity(loss: float) -> float:
    """exp(loss), or infinity when that overflows (an untrained or diverged model)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def with_perplexity(metrics: dict[str, float], prefix: str = "eval") -> dict[str, float]:
    """Language-model metrics: the evaluation loss and its perplexity."""
    loss = metrics.get(f"{prefix}_loss")
    return metrics if loss is None else {**metrics, f"{prefix}_perplexity": perplexity(loss)}
