"""Regression: one finite score per example, one output, mean squared error, and the
squared error between SMART's clean and perturbed scores (Jiang et al. 2020, Section 3.1)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from mtdnn.tasks.task_type import LabelError, TaskType


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


class Regression(TaskType):
    name = "regression"
    labels = Scores
    metrics = ("pearson", "spearman")
    default_metrics = ("pearson", "spearman")
    divergences = ("squared_error",)
    default_divergence = "squared_error"
    target_dtype = "float"

    def loss(self, scores: Any, labels: Any, label_smoothing: float = 0.0) -> Any:
        import torch.nn.functional as F

        return F.mse_loss(scores.float().squeeze(-1), labels.float())

    def predict(self, scores: Any, batch: dict[str, Any]) -> np.ndarray:
        """Scores ``[n]``."""
        return scores.float().squeeze(-1).float().cpu().numpy()


TASK_TYPE = Regression()
