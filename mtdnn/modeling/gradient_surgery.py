"""PCGrad gradient surgery (Yu et al., NeurIPS 2020) for steps that hold several tasks.

Each task's gradient is projected onto the normal plane of every other task's gradient it
conflicts with (negative dot product), in a random order, and the projected gradients are
summed. Cost: one backward pass per task in the step (instead of one for their summed
loss) and one flat copy of all gradients per task in memory.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def pcgrad(grads: list[torch.Tensor], rng: np.random.Generator) -> torch.Tensor:
    """Sum of the task gradients after projecting away their pairwise conflicts."""
    projected = []
    for i, grad in enumerate(grads):
        g = grad.clone()
        others = [j for j in rng.permutation(len(grads)) if j != i]
        for j in others:
            dot = torch.dot(g, grads[j])
            if dot < 0:
                g -= dot / grads[j].pow(2).sum().clamp_min(1e-20) * grads[j]
        projected.append(g)
    return torch.stack(projected).sum(0)


def conflict_rates(grads: list[torch.Tensor]) -> list[float]:
    """For each task, the fraction of the step's other tasks whose gradient conflicts with
    its own (negative dot product): how often PCGrad changes that task's gradient at all."""
    others = len(grads) - 1
    return [sum(bool(torch.dot(g, h) < 0) for j, h in enumerate(grads) if j != i) / others
            for i, g in enumerate(grads)]


def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def take_gradients(model: nn.Module) -> tuple[torch.Tensor, list[bool]]:
    """The model's gradients as one flat vector (zeros where none), and which parameters
    had one; the gradients are cleared."""
    params = trainable(model)
    present = [p.grad is not None for p in params]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in params])
    for p in params:
        p.grad = None
    return flat, present


def put_gradients(model: nn.Module, flat: torch.Tensor, present: list[bool]) -> None:
    """Write a flat gradient back; parameters no task touched keep no gradient."""
    offset = 0
    for param, has in zip(trainable(model), present, strict=True):
        size = param.numel()
        if has:
            param.grad = flat[offset:offset + size].view_as(param).clone()
        offset += size
