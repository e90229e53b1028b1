"""Batched inference: head outputs → each task type's predictions, and dev metrics.

Examples are run in order of length so each batch pads little, then put back in file
order. Runs under ``torch.inference_mode()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from mtdnn.data.tokenized import Collator, TaskSplit, TaskSplits, get_batch
from mtdnn.modeling.model import ENCODER_INPUTS, MultiTaskModel
from mtdnn.modeling.precision import autocast_context
from mtdnn.tasks.task_def import TaskDef


@torch.inference_mode()
def predict_heads(model: MultiTaskModel, split: TaskSplit, collator: Collator,
                  batch_size: int, device: torch.device, amp_dtype: torch.dtype | None = None,
                  on_batch: Callable[[int], None] | None = None,
                  tasks: list[TaskDef] | None = None) -> dict[str, Any]:
    """Each of ``tasks``' (default: the split's task) predictions for every example of
    ``split``, as its type decodes them (class probabilities ``[n, labels]``, scores
    ``[n]``, one tag distribution per word...); the encoder runs once per batch and every
    head reads that pass."""
    was_training = model.training
    model.eval()
    tasks = tasks or [split.task]
    kind = split.task.task_type
    collate = collator.of(split.task)
    order = np.argsort(-kind.lengths(split.dataset), kind="stable")
    outputs: dict[str, list[Any]] = {task.name: [] for task in tasks}
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = {k: v.to(device) for k, v in get_batch(split, indices, collate).items()
                 if k != "labels"}
        encoder_inputs = {k: v for k, v in batch.items() if k in ENCODER_INPUTS}
        extras = {k: v for k, v in batch.items() if k not in ENCODER_INPUTS}
        with autocast_context(device, amp_dtype):
            encoded = model.encode(**encoder_inputs)
            for task in tasks:
                head = model.heads[task.name](encoded, **extras)
                outputs[task.name].append(task.task_type.predict(head, batch))
        if on_batch is not None:
            on_batch(len(indices))
    predictions = {task.name: task.task_type.gather(outputs[task.name], order) for task in tasks}
    model.train(was_training)
    return predictions


def predict_split(model: MultiTaskModel, split: TaskSplit, collator: Collator, batch_size: int,
                  device: torch.device, amp_dtype: torch.dtype | None = None,
                  on_batch: Callable[[int], None] | None = None) -> Any:
    """The split's task's predictions for every example of ``split``
    (:func:`predict_heads`)."""
    return predict_heads(model, split, collator, batch_size, device, amp_dtype,
                         on_batch)[split.task.name]


def evaluate_tasks(model: MultiTaskModel, data: dict[str, TaskSplits], batch_size: int,
                   device: torch.device, amp_dtype: torch.dtype | None = None
                   ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Every task's dev metrics, and the mean entropy of its dev predictions where its type
    predicts distributions (near ln(labels), the model barely commits)."""
    metrics, entropy = {}, {}
    for task, splits in data.items():
        if splits.dev is None:
            continue
        predicted = predict_split(model, splits.dev, splits.collator, batch_size, device,
                                  amp_dtype)
        kind = splits.dev.task.task_type
        metrics[task] = kind.score(splits.dev.task, predicted, splits.dev.dataset)
        if (value := kind.entropy(predicted)) is not None:
            entropy[task] = value
    return metrics, entropy


def task_groups(tasks: list[TaskDef], by_name: bool = True
                ) -> list[tuple[tuple[str, ...], list[TaskDef]]]:
    """The tasks grouped by the texts they read, in order of first appearance: each group
    shares one encoding of the input, and so one encoder pass per batch. Records (and
    files) name their fields, so tasks reading the same field names share; positional
    examples (a text, a pair) are read by position, so tasks reading as many texts share;
    only tasks whose types featurize alike (``TaskType.layout``) share an encoding.
    Each group comes with its first task's fields."""
    groups: dict[Any, list[TaskDef]] = {}
    for task in tasks:
        fields = tuple(task.inputs) if by_name else len(task.inputs)
        groups.setdefault((task.task_type.layout, fields), []).append(task)
    return [(tuple(group[0].inputs), group) for group in groups.values()]
