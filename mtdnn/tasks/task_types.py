"""The one table from task type to behaviour.

Everything that differs between classification and regression is looked up here: what a
label is (:class:`ClassLabels`, :class:`Scores`: how one is read, summarised, written out
and exported), its metrics, the SMART divergence (symmetric KL for classification, squared
error for regression; Jiang et al. 2020, Section 3.1), the task loss and how the head's
outputs become predictions. Nothing else in the package asks ``if task_type == ...`` or
whether a task has labels.

Torch is imported inside the functions so that reading task definitions (data preparation)
does not pay for it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

METRICS = ("accuracy", "f1", "mcc", "pearson", "spearman")


def _cross_entropy(logits: Any, labels: Any, label_smoothing: float = 0.0) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)


def _mean_squared_error(scores: Any, labels: Any, label_smoothing: float = 0.0) -> Any:
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


class LabelError(ValueError):
    """A label the task cannot take: ``problem`` and what is ``allowed``."""

    def __init__(self, problem: str, allowed: str) -> None:
        super().__init__(problem)
        self.problem, self.allowed = problem, allowed


class ClassLabels:
    """Classification: a label is one of the task's label names (or its position, as a
    Hugging Face ``ClassLabel`` stores it); the head has one logit per label."""

    has_names = True

    @staticmethod
    def width(labels: tuple[str, ...]) -> int:
        return len(labels)

    @staticmethod
    def check(labels: tuple[str, ...]) -> tuple[str, str] | None:
        """(problem, allowed) if ``labels`` cannot define the task, else None."""
        if len(labels) < 2:
            return (f"a classification task needs at least two labels, found {list(labels)}",
                    "an ordered list of two or more distinct strings")
        if any(not label.strip() for label in labels):
            return "labels must be non-empty strings", "non-empty strings"
        duplicates = sorted({x for x in labels if labels.count(x) > 1})
        if duplicates:
            return f"duplicate label '{duplicates[0]}'", "distinct labels"
        return None

    @staticmethod
    def parse(value: Any, labels: tuple[str, ...]) -> int:
        """A label as read from a data file → its index: a label name, or an integer
        position (what a Hugging Face ``ClassLabel`` column or its export holds)."""
        if isinstance(value, str) and value in labels:
            return labels.index(value)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(labels):
            return value
        positions = f"0-{len(labels) - 1}" if len(labels) > 2 else "0, 1"
        raise LabelError(f"label {value!r} is not one of the task's labels",
                         f"{', '.join(labels)}, or their positions {positions}")

    @staticmethod
    def canonical(value: str, labels: tuple[str, ...]) -> str:
        """A raw label (text from a source file) → what canonical JSONL stores (the label's
        name); positions are not labels in raw text."""
        if value.strip() not in labels:
            raise LabelError(f"label {value.strip()!r} is not one of the task's labels",
                             ", ".join(labels))
        return value.strip()

    @staticmethod
    def arrow(column: Any, labels: tuple[str, ...]) -> list | None:
        """An Arrow label column → indices, or None if any value is not a label name."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if pa.types.is_integer(column.type):  # positions, as a ClassLabel stores them
            inside = pc.and_(pc.greater_equal(column, 0), pc.less(column, len(labels)))
            return column.to_pylist() if pc.all(inside).as_py() else None
        if not pa.types.is_string(column.type):
            return None
        index = pc.index_in(column, value_set=pa.array(labels))
        return None if index.null_count else index.to_pylist()

    @staticmethod
    def summary(values: Iterable[Any], labels: tuple[str, ...]) -> dict[str, Any]:
        counts = Counter(values)
        return {label: counts[label] for label in labels if counts[label]}

    @staticmethod
    def record(decided: Any, predicted: Any, labels: tuple[str, ...]) -> dict[str, Any]:
        """One prediction as written out: the label and every label's probability."""
        return {"prediction": labels[int(decided)],
                "probabilities": {name: round(float(p), 6)
                                  for name, p in zip(labels, predicted, strict=True)}}

    @staticmethod
    def hf_config(labels: tuple[str, ...]) -> dict[str, Any]:
        return {"id2label": dict(enumerate(labels)),
                "label2id": {label: i for i, label in enumerate(labels)},
                "problem_type": "single_label_classification"}


class Scores:
    """Regression: a label is a finite number; the head has one output."""

    has_names = False

    @staticmethod
    def width(labels: tuple[str, ...]) -> int:
        return 1

    @staticmethod
    def check(labels: tuple[str, ...]) -> tuple[str, str] | None:
        if labels:
            return f"a regression task has no labels, found {list(labels)}", "remove the key"
        return None

    @staticmethod
    def parse(value: Any, labels: tuple[str, ...]) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            raise LabelError(f"regression score {value!r} is not a finite number",
                             "a finite number")
        return float(value)

    @classmethod
    def canonical(cls, value: str, labels: tuple[str, ...]) -> float:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise LabelError(f"regression score {value.strip()!r} is not a number",
                             "a finite number")
        return score

    @staticmethod
    def arrow(column: Any, labels: tuple[str, ...]) -> list | None:
        """An Arrow label column → floats, or None if any value is not a finite number."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            return None
        scores = pc.cast(column, pa.float64())
        return scores.to_pylist() if pc.all(pc.is_finite(scores)).as_py() else None

    @staticmethod
    def summary(values: Iterable[Any], labels: tuple[str, ...]) -> dict[str, Any]:
        values = list(values)
        if not values:
            return {}
        return {"count": len(values), "mean": round(sum(values) / len(values), 6),
                "min": min(values), "max": max(values)}

    @staticmethod
    def record(decided: Any, predicted: Any, labels: tuple[str, ...]) -> dict[str, Any]:
        return {"prediction": float(decided)}

    @staticmethod
    def hf_config(labels: tuple[str, ...]) -> dict[str, Any]:
        return {"id2label": {0: "score"}, "label2id": {"score": 0},
                "problem_type": "regression"}


@dataclass(frozen=True)
class TaskType:
    """How one kind of task is trained, regularised, predicted and scored."""

    name: str
    labels: type[ClassLabels] | type[Scores]  # what a label is
    metrics: tuple[str, ...]
    default_metrics: tuple[str, ...]  # a task definition that names none gets these
    divergences: tuple[str, ...]
    default_divergence: str
    # (head outputs, targets, label_smoothing) -> scalar loss (regression ignores smoothing)
    loss: Callable[..., Any]
    predict: Callable[[Any], Any]  # head outputs -> class probabilities | scores
    decide: Callable[[Any], Any]  # predict() output -> class index | score (numpy or torch)
    target_dtype: str  # torch dtype name of the training targets


TASK_TYPES: dict[str, TaskType] = {
    "classification": TaskType(
        name="classification",
        labels=ClassLabels,
        metrics=("accuracy", "f1", "mcc"),
        default_metrics=("accuracy",),
        divergences=("symmetric_kl",),
        default_divergence="symmetric_kl",
        loss=_cross_entropy,
        predict=_class_probabilities,
        decide=_argmax,
        target_dtype="long",
    ),
    "regression": TaskType(
        name="regression",
        labels=Scores,
        metrics=("pearson", "spearman"),
        default_metrics=("pearson", "spearman"),
        divergences=("squared_error",),
        default_divergence="squared_error",
        loss=_mean_squared_error,
        predict=_score,
        decide=_identity,
        target_dtype="float",
    ),
}
