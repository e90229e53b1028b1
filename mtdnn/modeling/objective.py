"""The loss of one batch of one task: task loss + λ_s R_s (eq. 1) + μ D_Breg (eq. 3).

:func:`batch_loss` is the training step's arithmetic, callable alone: the trainer calls it
for every minibatch, the SMART cost benchmark times it, and tests check it on tiny models.
What it returns for logging stays on the device (detached 0-d tensors); the trainer moves
values to the host only when it logs them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mtdnn.config.smart_config import SmartConfig
from mtdnn.modeling.model import MultiTaskModel
from mtdnn.modeling.smart import (
    MeanTeacher,
    adversarial_loss,
    bregman_loss,
    rng_replayer,
    without_parameter_grads,
)
from mtdnn.tasks.task_def import TaskDef

log = logging.getLogger(__name__)

# The SMART terms batch_loss logs, by name: what a record summarises as the evidence
# that a regulariser acted (and how strongly, next to the task loss).
LOGGED_TERMS = ("adv_ratio", "delta_linf", "adv_grad_cos", "bregman_ratio")


def _call(fn: Callable[..., torch.Tensor], *args, **kwargs) -> torch.Tensor:
    """Run ``fn`` from the current random state (independent dropout masks)."""
    return fn(*args, **kwargs)


@dataclass
class BatchLoss:
    """The loss to back-propagate and the terms to log (detached, on the device)."""

    loss: torch.Tensor
    task_loss: torch.Tensor
    terms: dict[str, torch.Tensor] = field(default_factory=dict)
    # the ascent was not finite, R_s left out of this batch (a bool tensor, or False)
    adv_skipped: torch.Tensor | bool = False


def batch_loss(model: MultiTaskModel, task: TaskDef, batch: dict[str, torch.Tensor],
               labels: torch.Tensor, smart: SmartConfig, adv_weight: float,
               teacher: MeanTeacher | None = None, label_smoothing: float = 0.0) -> BatchLoss:
    """Forward one batch of ``task``; the task loss plus SMART's terms where they are on.

    Logged terms: ``adv_loss`` (R_s), ``adv_ratio`` (λ_s R_s ÷ task loss), ``delta_linf``
    (‖δ‖∞), ``adv_grad_cos`` (cosine of δ and the ascent gradient), ``bregman_loss`` and
    ``bregman_ratio`` (μ D_Breg ÷ task loss).
    """
    divergence = task.task_type.divergence(task.divergence, batch)
    device = labels.device
    # One random state for the clean pass, the adversarial passes and the teacher: replayed,
    # they all draw the clean pass's dropout masks (share_dropout, teacher_dropout: shared).
    share_adv = bool(adv_weight) and smart.share_dropout
    share_teacher = teacher is not None and smart.teacher_dropout == "shared"
    replay = rng_replayer(device) if share_adv or share_teacher else _call
    if adv_weight:
        outputs, perturbable = model.clean_pass(task.name, batch, smart.perturb)
    else:
        outputs = model(task.name, **batch)
    task_loss = task.task_type.loss(outputs, labels, label_smoothing=label_smoothing)
    result = BatchLoss(task_loss, task_loss.detach())
    scale = task_loss.detach().float().clamp_min(1e-12)
    if adv_weight:
        adv_replay = replay if smart.share_dropout else _call

        def forward(x: torch.Tensor) -> torch.Tensor:
            return adv_replay(model.perturbed_pass, task.name, batch, smart.perturb, x)

        adv = adversarial_loss(
            forward, perturbable, outputs, batch["attention_mask"], divergence,
            epsilon=smart.epsilon, noise_std=smart.noise_std, step_size=smart.eta,
            steps=smart.ascent_steps, ascent=smart.ascent, guard=smart.guard,
            ascent_forward=without_parameter_grads(model, forward))
        result.loss = result.loss + adv_weight * adv.loss
        result.adv_skipped = adv.skipped
        result.terms.update(
            adv_loss=adv.loss.detach(), adv_ratio=adv_weight * adv.loss.detach() / scale,
            delta_linf=adv.delta.abs().amax(), adv_grad_cos=adv.grad_cosine)
    if teacher is not None:
        teacher_replay = replay if share_teacher else _call
        breg = bregman_loss(outputs, teacher_replay(teacher, task.name, **batch), divergence)
        result.loss = result.loss + smart.bregman_weight * breg
        result.terms.update(bregman_loss=breg.detach(),
                            bregman_ratio=smart.bregman_weight * breg.detach() / scale)
    return result
