"""What a task type is: the behaviour one kind of task brings (what its label is, its
loss, its SMART divergences, its metrics, how its head's outputs become predictions), as
one :class:`TaskType`. Each type is a module of :mod:`mtdnn.tasks.types`, registered there;
nothing else in the package asks which type a task is.

Torch is imported inside the types' functions, so that reading task definitions (data
preparation) does not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

METRICS = ("accuracy", "f1", "mcc", "pearson", "spearman")


class LabelError(ValueError):
    """A label the task cannot take: ``problem`` and what is ``allowed``."""

    def __init__(self, problem: str, allowed: str) -> None:
        super().__init__(problem)
        self.problem, self.allowed = problem, allowed


@dataclass(frozen=True)
class TaskType:
    """How one kind of task is trained, regularised, predicted and scored."""

    name: str
    labels: Any  # what a label is: a class like ClassLabels (types/classification.py)
    metrics: tuple[str, ...]
    default_metrics: tuple[str, ...]  # a task definition that names none gets these
    divergences: tuple[str, ...]
    default_divergence: str
    # (head outputs, targets, label_smoothing) -> scalar loss (regression ignores smoothing)
    loss: Callable[..., Any]
    predict: Callable[[Any], Any]  # head outputs -> class probabilities | scores
    decide: Callable[[Any], Any]  # predict() output -> class index | score (numpy or torch)
    target_dtype: str  # torch dtype name of the training targets
