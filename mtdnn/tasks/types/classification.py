"""Classification: one label of a fixed list per example, a logit per label, cross-entropy,
and the symmetric KL between SMART's clean and perturbed class distributions (Jiang et al.
2020, Section 3.1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from mtdnn.tasks.task_type import LabelError, TaskType, first_duplicate


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
        if (duplicate := first_duplicate(labels)) is not None:
            return f"duplicate label '{duplicate}'", "distinct labels"
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


class Classification(TaskType):
    name = "classification"
    labels = ClassLabels
    metrics = ("accuracy", "f1", "mcc")
    default_metrics = ("accuracy",)
    divergences = ("symmetric_kl",)
    default_divergence = "symmetric_kl"
    target_dtype = "long"

    def check_definition(self, task: Any) -> tuple[str, str, str] | None:
        if "f1" in task.metrics and len(task.labels) != 2:
            return ("metrics", "f1 needs exactly two labels (the second is the positive class)",
                    "accuracy, mcc for more than two labels")
        return None

    def loss(self, logits: Any, labels: Any, label_smoothing: float = 0.0) -> Any:
        import torch.nn.functional as F

        return F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)

    def predict(self, logits: Any, batch: dict[str, Any]) -> np.ndarray:
        """Class probabilities ``[n, labels]``."""
        return logits.float().softmax(dim=-1).float().cpu().numpy()

    def decide(self, probabilities: Any) -> Any:
        return probabilities.argmax(-1)

    def entropy(self, probabilities: np.ndarray) -> float | None:
        """Near ln(labels), a uniform guess: the model barely commits."""
        from mtdnn.tasks.metrics import mean_entropy

        return mean_entropy(probabilities)


TASK_TYPE = Classification()
