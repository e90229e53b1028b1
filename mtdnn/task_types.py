"""The one table from task type to behaviour.

Everything that differs between classification and regression is looked up here: the
metrics that make sense, the SMART divergence (symmetric KL for classification, squared
error for regression; Jiang et al. 2020, Section 3.1) and whether the task has labels.
Heads and losses are added to this table by the model code, so nothing else in the
package needs an ``if task_type == ...``.
"""

from __future__ import annotations

from dataclasses import dataclass

METRICS = ("accuracy", "f1", "mcc", "pearson", "spearman")
DIVERGENCES = ("symmetric_kl", "squared_error")


@dataclass(frozen=True)
class TaskType:
    name: str
    has_labels: bool
    metrics: tuple[str, ...]
    divergences: tuple[str, ...]
    default_divergence: str


TASK_TYPES: dict[str, TaskType] = {
    "classification": TaskType(
        name="classification",
        has_labels=True,
        metrics=("accuracy", "f1", "mcc"),
        divergences=("symmetric_kl",),
        default_divergence="symmetric_kl",
    ),
    "regression": TaskType(
        name="regression",
        has_labels=False,
        metrics=("pearson", "spearman"),
        divergences=("squared_error",),
        default_divergence="squared_error",
    ),
}
