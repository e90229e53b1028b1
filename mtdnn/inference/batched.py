"""Batched inference: head outputs → probabilities / scores, and dev metrics.

Examples are run in order of length so each batch pads little, then put back in file
order. Runs under ``torch.inference_mode()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from mtdnn.data.tokenized import Collator, TaskSplit, TaskSplits, get_batch
from mtdnn.modeling.model import MultiTaskModel
from mtdnn.modeling.precision import autocast_context
from mtdnn.tasks.metrics import compute_metrics, mean_entropy
from mtdnn.tasks.task_def import TaskDef


@torch.inference_mode()
def predict_heads(model: MultiTaskModel, split: TaskSplit, collator: Collator,
                  batch_size: int, device: torch.device, amp_dtype: torch.dtype | None = None,
                  on_batch: Callable[[int], None] | None = None,
                  tasks: list[TaskDef] | None = None) -> dict[str, np.ndarray]:
    """Each of ``tasks``' (default: the split's task) class probabilities ``[n, labels]`` or
    scores ``[n]`` for every example of ``split``; the encoder runs once per batch and
    every head reads its pooled output."""
    was_training = model.training
    model.eval()
    tasks = tasks or [split.task]
    lengths = np.array([len(ids) for ids in split.dataset["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    outputs: dict[str, list[np.ndarray]] = {task.name: [] for task in tasks}
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = get_batch(split, indices, collator)
        batch.pop("labels", None)
        with autocast_context(device, amp_dtype):
            pooled = model.pool(**{k: v.to(device) for k, v in batch.items()})
            for task in tasks:
                head = model.heads[task.name](pooled)
                outputs[task.name].append(task.task_type.predict(head).float().cpu().numpy())
        if on_batch is not None:
            on_batch(len(indices))
    predictions = {}
    for name, parts in outputs.items():
        predictions[name] = np.empty_like(np.concatenate(parts))
        predictions[name][order] = np.concatenate(parts)
    model.train(was_training)
    return predictions


def predict_split(model: MultiTaskModel, split: TaskSplit, collator: Collator, batch_size: int,
                  device: torch.device, amp_dtype: torch.dtype | None = None,
                  on_batch: Callable[[int], None] | None = None) -> np.ndarray:
    """Class probabilities ``[n, labels]`` or scores ``[n]`` for every example of ``split``."""
    return predict_heads(model, split, collator, batch_size, device, amp_dtype,
                         on_batch)[split.task.name]


def evaluate_tasks(model: MultiTaskModel, data: dict[str, TaskSplits], batch_size: int,
                   device: torch.device, amp_dtype: torch.dtype | None = None
                   ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Every task's dev metrics, and the mean entropy of its dev predictions (classification
    tasks: near ln(labels), the model barely commits)."""
    metrics, entropy = {}, {}
    for task, splits in data.items():
        if splits.dev is None:
            continue
        predicted = predict_split(model, splits.dev, splits.collator, batch_size, device,
                                  amp_dtype)
        metrics[task] = split_metrics(splits.dev, predicted)
        if (value := mean_entropy(predicted)) is not None:
            entropy[task] = value
    return metrics, entropy


def task_groups(tasks: list[TaskDef], by_name: bool = True
                ) -> dict[tuple[str, ...], list[TaskDef]]:
    """The tasks grouped by the texts they read, in order of first appearance: each group
    shares one encoding of the input, and so one encoder pass per batch. Records (and
    files) name their fields, so tasks reading the same field names share; positional
    examples (a text, a pair) are read by position, so tasks reading as many texts share.
    Each group is keyed by its first task's fields."""
    groups: dict[Any, list[TaskDef]] = {}
    for task in tasks:
        groups.setdefault(tuple(task.inputs) if by_name else len(task.inputs), []).append(task)
    return {tuple(group[0].inputs): group for group in groups.values()}


def split_metrics(split: TaskSplit, predicted: np.ndarray) -> dict[str, float]:
    """The task's metrics of ``predicted`` (from :func:`mtdnn.inference.batched.predict_split`) on
    a labelled split."""
    decided = split.task.task_type.decide(predicted)
    labels = np.asarray(split.dataset["labels"])
    return compute_metrics(split.task.metrics, decided, labels)
