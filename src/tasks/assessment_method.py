"""Evaluation metrics of the fine-tuning tasks (GLUE's choices): accuracy, F1 (binary or macro), Matthews
correlation (CoLA), Spearman and Pearson correlation (STS-B).

Each function takes plain label/prediction sequences (numpy arrays or lists) and returns a float; `METHODS`
maps the `assessment_method` names of the task yaml to them. Degenerate inputs follow the usual conventions:
F1 and MCC are 0 when undefined (no positive predictions and labels, or a constant column), correlations of a
constant column are an error, since no number would be meaningful.
"""
from typing import Callable, Dict, Sequence

import numpy as np

from model_utils.errors import UserError


def _pair(labels: Sequence, predictions: Sequence):
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape or labels.ndim != 1 or labels.size == 0:
        raise UserError(f"metrics need two equally long, non-empty 1-d sequences; got shapes {labels.shape} and "
                        f"{predictions.shape}")
    return labels, predictions


def accuracy(labels: Sequence, predictions: Sequence) -> float:
    labels, predictions = _pair(labels, predictions)
    return float(np.mean(labels == predictions))


def _f1_of(labels: np.ndarray, predictions: np.ndarray, positive) -> float:
    true_pos = np.sum((predictions == positive) & (labels == positive))
    predicted, actual = np.sum(predictions == positive), np.sum(labels == positive)
    return float(2 * true_pos / (predicted + actual)) if predicted + actual else 0.0


def f1(labels: Sequence, predictions: Sequence, average: str = "binary", positive_label=1) -> float:
    """`binary`: F1 of `positive_label` (MRPC, QQP); `macro`: unweighted mean over the classes in the labels."""
    labels, predictions = _pair(labels, predictions)
    if average == "binary":
        return _f1_of(labels, predictions, positive_label)
    if average == "macro":
        return float(np.mean([_f1_of(labels, predictions, c) for c in np.unique(labels)]))
    raise UserError(f"f1 average must be 'binary' or 'macro', got {average!r}")


def matthews_correlation(labels: Sequence, predictions: Sequence) -> float:
    """Multi-class MCC from the confusion matrix (Gorodkin's R_K; the binary formula for two classes)."""
    labels, predictions = _pair(labels, predictions)
    classes = np.unique(np.concatenate([labels, predictions]))
    index = {c: i for i, c in enumerate(classes)}
    confusion = np.zeros((len(classes), len(classes)), np.float64)
    for label, prediction in zip(labels, predictions):
        confusion[index[label], index[prediction]] += 1
    total, correct = confusion.sum(), np.trace(confusion)
    actual, predicted = confusion.sum(1), confusion.sum(0)
    numerator = correct * total - actual @ predicted
    denominator = np.sqrt((total ** 2 - predicted @ predicted) * (total ** 2 - actual @ actual))
    return float(numerator / denominator) if denominator else 0.0


def pearson_correlation(labels: Sequence, predictions: Sequence) -> float:
    labels, predictions = _pair(labels, predictions)
    x, y = labels.astype(np.float64), predictions.astype(np.float64)
    x, y = x - x.mean(), y - y.mean()
    scale = np.sqrt((x @ x) * (y @ y))
    if scale == 0:
        raise UserError("correlation of a constant sequence is undefined")
    return float((x @ y) / scale)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their mean rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), np.float64)
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0
            start = end
    return ranks


def spearman_correlation(labels: Sequence, predictions: Sequence) -> float:
    """Pearson correlation of the (tie-averaged) ranks."""
    labels, predictions = _pair(labels, predictions)
    return pearson_correlation(_ranks(labels.astype(np.float64)), _ranks(predictions.astype(np.float64)))


METHODS: Dict[str, Callable[[Sequence, Sequence], float]] = {
    "accuracy": accuracy,
    "f1": f1,
    "macro_f1": lambda labels, predictions: f1(labels, predictions, average="macro"),
    "mcc": matthews_correlation,
    "spearman_correlation": spearman_correlation,
    "pearson_correlation": pearson_correlation,
}
