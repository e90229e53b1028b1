"""Batched inference: head outputs → probabilities / scores, and dev metrics.

Examples are run in order of length so each batch pads little, then put back in file
order. Runs under ``torch.inference_mode()``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from mtdnn.data import Collator, TaskSplit, get_batch
from mtdnn.metrics import compute_metrics
from mtdnn.model import MultiTaskModel


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype`` on ``device``, or a no-op for full precision."""
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


@torch.inference_mode()
def predict_split(model: MultiTaskModel, split: TaskSplit, collator: Collator, batch_size: int,
                  device: torch.device, amp_dtype: torch.dtype | None = None,
                  on_batch: Callable[[int], None] | None = None) -> np.ndarray:
    """Class probabilities ``[n, labels]`` or scores ``[n]`` for every example of ``split``."""
    was_training = model.training
    model.eval()
    task_type = split.task.task_type
    lengths = np.array([len(ids) for ids in split.dataset["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    outputs: list[np.ndarray] = []
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = get_batch(split, indices, collator)
        batch.pop("labels", None)
        with autocast_context(device, amp_dtype):
            head = model(split.task.name, **{k: v.to(device) for k, v in batch.items()})
        outputs.append(task_type.predict(head).cpu().numpy())
        if on_batch is not None:
            on_batch(len(indices))
    predictions = np.empty_like(np.concatenate(outputs))
    predictions[order] = np.concatenate(outputs)
    model.train(was_training)
    return predictions


def evaluate_split(model: MultiTaskModel, split: TaskSplit, collator: Collator,
                   batch_size: int, device: torch.device,
                   amp_dtype: torch.dtype | None = None) -> dict[str, float]:
    """The task's metrics on a labelled split."""
    predicted = predict_split(model, split, collator, batch_size, device, amp_dtype)
    decided = split.task.task_type.decide(predicted)
    labels = np.asarray(split.dataset["labels"])
    return compute_metrics(split.task.metrics, decided, labels)
