"""Evaluation metrics for fine-tuning: classification, regression and multiple choice.

Pure NumPy (sklearn and scipy are not project dependencies). The conventions follow sklearn
and scipy where they are defined, and are documented per function where they are not:

* macro F1 averages over the classes that occur in the labels or the predictions (sklearn's
  default label set); a class predicted but never true, or true but never predicted, has F1 0
  (sklearn's ``zero_division=0``).
* MCC is 0 when undefined (a constant prediction or constant labels), as in sklearn.
* Pearson and Spearman are NaN when undefined (a constant input), as in scipy.

Every function returns a Python float, so the result dictionaries serialise to JSON directly.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


# ------------------------------------------------------------------------------ classification
def accuracy(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Fraction of examples whose predicted class (or choice) equals the label."""
    labels, predictions = _same_shape(labels, predictions)
    return float(np.mean(labels == predictions))


def macro_f1(labels: ArrayLike, predictions: ArrayLike, num_classes: int) -> float:
    """Unweighted mean of the per-class F1 over the classes present in labels or predictions.

    Per class F1 = 2·TP / (#true + #predicted), which equals 2PR / (P + R) and is 0 when
    the class is only true or only predicted. Classes in neither are left out of the mean.
    """
    matrix = confusion_matrix(labels, predictions, num_classes)
    true_counts, predicted_counts = matrix.sum(axis=1), matrix.sum(axis=0)
    present = (true_counts + predicted_counts) > 0
    f1 = 2.0 * np.diag(matrix)[present] / (true_counts + predicted_counts)[present]
    return float(np.mean(f1))


def matthews_corrcoef(labels: ArrayLike, predictions: ArrayLike, num_classes: int) -> float:
    """Multiclass Matthews correlation (Gorodkin 2004), 0 when the denominator is 0.

    With C the confusion matrix, s examples, c correct, t_k true and p_k predicted counts:
    MCC = (c·s − Σ p_k·t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)). For two classes this is the
    phi coefficient (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)).
    """
    matrix = confusion_matrix(labels, predictions, num_classes).astype(np.float64)
    true_counts, predicted_counts = matrix.sum(axis=1), matrix.sum(axis=0)
    total, correct = matrix.sum(), np.trace(matrix)
    numerator = correct * total - predicted_counts @ true_counts
    denominator = np.sqrt((total**2 - predicted_counts @ predicted_counts) * (total**2 - true_counts @ true_counts))
    return float(numerator / denominator) if denominator > 0 else 0.0


def confusion_matrix(labels: ArrayLike, predictions: ArrayLike, num_classes: int) -> np.ndarray:
    """[num_classes, num_classes] int counts, rows = true class, columns = predicted class."""
    labels, predictions = _same_shape(labels, predictions)
    for name, values in (("labels", labels), ("predictions", predictions)):
        if not np.issubdtype(values.dtype, np.integer) or values.min() < 0 or values.max() >= num_classes:
            raise ValueError(f"{name} must be integer classes in [0, {num_classes})")
    flat = labels.ravel() * num_classes + predictions.ravel()
    return np.bincount(flat, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


# ---------------------------------------------------------------------------------- regression
def pearson(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson correlation of two equally long sequences; NaN if either is constant."""
    x, y = (values.ravel().astype(np.float64) for values in _same_shape(x, y))
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt((dx @ dx) * (dy @ dy))
    return float(dx @ dy / denominator) if denominator > 0 else float("nan")


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman rank correlation: Pearson of the ranks, tied values sharing their average rank."""
    x, y = _same_shape(x, y)
    return pearson(_average_ranks(x.ravel()), _average_ranks(y.ravel()))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of a 1-D array; a group of equal values gets the mean of the ranks it spans."""
    _, group, counts = np.unique(values, return_inverse=True, return_counts=True)
    last_rank = np.cumsum(counts)  # sorted groups: group g spans ranks last - count + 1 .. last
    return (last_rank - (counts - 1) / 2.0)[group]


# ---------------------------------------------------------------------------------- per task
def classification_metrics(labels: ArrayLike, probabilities_or_predictions: ArrayLike,
                           num_classes: int) -> dict[str, float]:
    """accuracy, macro_f1 and mcc from class ids [N] or per-class scores [N, num_classes] (argmax)."""
    labels = np.asarray(labels)
    predictions = _predicted_classes(labels, probabilities_or_predictions)
    return {"accuracy": accuracy(labels, predictions),
            "macro_f1": macro_f1(labels, predictions, num_classes),
            "mcc": matthews_corrcoef(labels, predictions, num_classes)}


def regression_metrics(targets: ArrayLike, scores: ArrayLike) -> dict[str, float]:
    """pearson and spearman between targets and scores ([N] or the regression head's [N, 1])."""
    targets, scores = np.ravel(targets), np.ravel(scores)
    return {"pearson": pearson(targets, scores), "spearman": spearman(targets, scores)}


def multiple_choice_metrics(labels: ArrayLike, predictions: ArrayLike) -> dict[str, float]:
    """accuracy from chosen indices [N] or per-choice scores [N, num_choices] (argmax)."""
    labels = np.asarray(labels)
    return {"accuracy": accuracy(labels, _predicted_classes(labels, predictions))}


def _predicted_classes(labels: np.ndarray, values: ArrayLike) -> np.ndarray:
    """Class ids as given, or the argmax of scores that have one more (class) axis than labels."""
    values = np.asarray(values)
    return values.argmax(axis=-1) if values.ndim == labels.ndim + 1 else values


def _same_shape(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Both as arrays; refuses mismatched shapes (a silent broadcast would give a wrong metric) and empty input."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} and {b.shape}")
    if a.size == 0:
        raise ValueError("no examples")
    return a, b
