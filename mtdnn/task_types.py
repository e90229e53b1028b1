"""The one table from task type to behaviour.

Everything that differs between classification and regression is looked up here: whether
the task has labels, its metrics, the SMART divergence (symmetric KL for classification,
squared error for regression; Jiang et al. 2020, Section 3.1), the task loss and how the
head's outputs become predictions. Nothing else in the package asks ``if task_type == ...``.

Torch is imported inside the functions so that reading task definitions (data preparation)
does not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

METRICS = ("accuracy", "f1", "mcc", "pearson", "spearman")


def _cross_entropy(logits: Any, labels: Any) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(logits.float(), labels)


def _mean_squared_error(scores: Any, labels: Any) -> Any:
    import torch.nn.functional as F

    return F.mse_loss(scores.float().squeeze(-1), labels.float())


def _class_probabilities(logits: Any) -> Any:
    return logits.float().softmax(dim=-1)


def _score(scores: Any) -> Any:
    return scores.float().squeeze(-1)


def _argmax(probabilities: Any) -> Any:
    return probabilities.argmax(-1)


def _identity(scores: Any) -> Any:
    return scores


@dataclass(frozen=True)
class TaskType:
    """How one kind of task is trained, regularised, predicted and scored."""

    name: str
    has_labels: bool
    metrics: tuple[str, ...]
    divergences: tuple[str, ...]
    default_divergence: str
    loss: Callable[[Any, Any], Any]  # (head outputs, targets) -> scalar loss
    predict: Callable[[Any], Any]  # head outputs -> class probabilities | scores
    decide: Callable[[Any], Any]  # predict() output -> class index | score (numpy or torch)
    target_dtype: str  # torch dtype name of the training targets


TASK_TYPES: dict[str, TaskType] = {
    "classification": TaskType(
        name="classification",
        has_labels=True,
        metrics=("accuracy", "f1", "mcc"),
        divergences=("symmetric_kl",),
        default_divergence="symmetric_kl",
        loss=_cross_entropy,
        predict=_class_probabilities,
        decide=_argmax,
        target_dtype="long",
    ),
    "regression": TaskType(
        name="regression",
        has_labels=False,
        metrics=("pearson", "spearman"),
        divergences=("squared_error",),
        default_divergence="squared_error",
        loss=_mean_squared_error,
        predict=_score,
        decide=_identity,
        target_dtype="float",
    ),
}
