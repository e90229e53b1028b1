"""Dev-set metrics: accuracy, F1, Matthews correlation, Pearson and Spearman; and the mean
entropy of predicted class distributions (how far the model commits).

Inputs are numpy arrays: class indices for classification (F1's positive class is index
1, the second label of the task definition), float scores for regression.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mtdnn.errors import MtdnnError


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(predictions == labels))


def f1(predictions: np.ndarray, labels: np.ndarray) -> float:
    true_pos = float(np.sum((predictions == 1) & (labels == 1)))
    predicted, actual = float(np.sum(predictions == 1)), float(np.sum(labels == 1))
    if predicted + actual == 0:
        return 0.0
    return 2.0 * true_pos / (predicted + actual)


def mcc(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Matthews correlation (multi-class form of Gorodkin 2004); 0 when undefined."""
    classes = int(max(predictions.max(initial=0), labels.max(initial=0))) + 1
    confusion = np.zeros((classes, classes), dtype=np.float64)
    np.add.at(confusion, (labels.astype(int), predictions.astype(int)), 1)
    total, correct = confusion.sum(), np.trace(confusion)
    pred_totals, true_totals = confusion.sum(axis=0), confusion.sum(axis=1)
    numerator = correct * total - pred_totals @ true_totals
    denominator = np.sqrt((total**2 - pred_totals @ pred_totals) *
                          (total**2 - true_totals @ true_totals))
    return float(numerator / denominator) if denominator > 0 else 0.0


def _correlation(name: str) -> Callable[[np.ndarray, np.ndarray], float]:
    """``scipy.stats.<name>`` as a metric. scipy.stats is imported on first use: it adds
    about 0.4 s to the start of every run, and most runs have no regression metric."""
    def metric(predictions: np.ndarray, labels: np.ndarray) -> float:
        if len(labels) < 2 or np.std(predictions) == 0 or np.std(labels) == 0:
            return 0.0
        from scipy import stats

        return float(getattr(stats, name)(predictions, labels)[0])

    return metric


METRIC_FUNCTIONS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": accuracy,
    "f1": f1,
    "mcc": mcc,
    "pearson": _correlation("pearsonr"),
    "spearman": _correlation("spearmanr"),
}


def compute_metrics(names: tuple[str, ...], predictions: np.ndarray,
                    labels: np.ndarray) -> dict[str, float]:
    """``{metric: value}`` for each metric name."""
    return {name: METRIC_FUNCTIONS[name](predictions, labels) for name in names}


def score_of(metrics: dict[str, dict[str, float]], best_metric: str) -> float:
    """The model-selection score: ``mean`` of each task's first metric, or ``task/metric``."""
    if best_metric == "mean":
        return float(np.mean([next(iter(m.values())) for m in metrics.values()]))
    task, _, metric = best_metric.partition("/")
    return metrics[task][metric]


def check_best_metric(best_metric: str, tasks: dict[str, Any], with_dev: list[str]
                      ) -> None:
    """``best_metric`` names a metric of a task with a dev set (``with_dev``), or the mean."""
    allowed = ", ".join(["mean"] + [f"{t}/{m}" for t in with_dev for m in tasks[t].metrics])
    task, _, metric = best_metric.partition("/")
    if best_metric != "mean" and (task not in with_dev or metric not in tasks[task].metrics):
        raise MtdnnError(f"no dev metric '{best_metric}'", key="best_metric", allowed=allowed)


def mean_entropy(predicted: np.ndarray) -> float | None:
    """Mean entropy (nats) of predicted class distributions ``[n, labels]``; ``None`` for
    scores. ln(labels) is a uniform guess: near it, the model barely commits."""
    if predicted.ndim != 2 or len(predicted) == 0:
        return None
    probs = np.clip(predicted.astype(np.float64), 1e-12, 1.0)
    return float(-(probs * np.log(probs)).sum(axis=1).mean())
