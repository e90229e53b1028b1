"""SMART (Jiang et al., ACL 2020) as pure functions, plus the mean teacher and the run's
SMART pieces built from its config (:func:`smart_adv_weights`, :func:`build_teacher`).

- :func:`adversarial_loss` is the smoothness-inducing adversarial regulariser R_s of
  eq. (1), its inner maximisation solved as in Algorithm 1, lines 6-10, with p = ∞.
- :func:`bregman_loss` is the momentum Bregman proximal point term D_Breg(θ, θ̃_t) of
  eqs. (2)-(3); θ̃ is the :class:`MeanTeacher`, updated as in Algorithm 1, line 14.

The perturbation is added to the *word embeddings* (``get_input_embeddings()(ids)``) and
passed to the encoder as ``inputs_embeds``, so position and token-type embeddings and the
embedding LayerNorm are applied exactly once (the reference MT-DNN code perturbs the
embedding layer's output and feeds it back, applying them twice).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mtdnn.config.smart_config import SmartConfig
from mtdnn.errors import MtdnnError

# The divergences l_s are the task types' (mtdnn.tasks.divergences): each type's outputs
# have their own shape.
from mtdnn.tasks.divergences import Divergence
from mtdnn.tasks.task_def import TaskDef

log = logging.getLogger(__name__)


def project_linf(delta: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Projection onto the ℓ∞ ball of radius ε (Algorithm 1, line 9): clip each coordinate."""
    return delta.clamp(-epsilon, epsilon)


@dataclass
class AdversarialResult:
    """R_s for one batch, all on the device (nothing here waits for the host)."""

    loss: torch.Tensor  # 0 when ``skipped``
    delta: torch.Tensor  # final perturbation (detached), zero on padding
    # cosine between the final perturbation and the last ascent gradient (0-d, detached):
    # near 1 when the ascent shaped δ, near 0 when δ is still mostly its random start
    grad_cosine: torch.Tensor
    skipped: torch.Tensor  # bool: the ascent or the term was not finite, R_s left out


def projected_step(noise: torch.Tensor, grad: torch.Tensor, epsilon: float, step_size: float,
                   guard: float) -> torch.Tensor:
    """The paper's ascent step (Algorithm 1, lines 8-9, p = ∞): g̃ = g / ‖g‖∞ per example,
    ν ← Π_{‖ν‖∞ ≤ ε}(ν + η g̃)."""
    scale = grad.abs().amax(dim=(1, 2), keepdim=True)  # ‖g_i‖∞ per example
    return project_linf(noise + step_size * grad / scale.clamp_min(1e-12), epsilon)


def reference_step(noise: torch.Tensor, grad: torch.Tensor, epsilon: float, step_size: float,
                   guard: float) -> torch.Tensor:
    """The reference codes' step (smart-pytorch's ``SMARTLoss``, mt-dnn's perturbation):
    ν ← (ν + η g) / (‖ν + η g‖∞ + guard), the ℓ∞ norm taken per token over the hidden
    dimension. The result replaces ν; there is no projection and ε plays no part."""
    step = noise + step_size * grad
    return step / (step.abs().amax(dim=-1, keepdim=True) + guard)


ASCENT_STEPS = {"paper": projected_step, "reference": reference_step}


def adversarial_loss(
    forward: Callable[[torch.Tensor], torch.Tensor],
    embeddings: torch.Tensor,
    clean_outputs: torch.Tensor,
    mask: torch.Tensor,
    divergence: Divergence,
    *,
    epsilon: float = 1e-5,
    noise_std: float = 1e-5,
    step_size: float = 1e-3,
    steps: int = 1,
    ascent: str = "paper",
    guard: float = 1e-6,
    generator: torch.Generator | None = None,
    ascent_forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> AdversarialResult:
    """The smoothness-inducing adversarial regulariser R_s (eq. 1) for one batch.

    ``forward(e)`` maps the perturbed tensor ``e`` [B, L, H] (word embeddings, or the
    embedding layer's output) to head outputs; ``embeddings`` is its clean value (with its
    graph, so the final term trains what produced it too); ``clean_outputs`` = f(x; θ);
    ``mask`` [B, L] is 1 on real tokens, 0 on padding.

    Algorithm 1, lines 6-10: x̃ = x + ν, ν ~ N(0, σ²I); then ``steps`` (T_x̃) times: g =
    ∇_ν ℓ_s(f(x̃), f(x)) with the clean output detached and the gradient taken with
    respect to the noise only (``torch.autograd.grad``, so no parameter gradient is
    accumulated); then ν is updated by ``ascent``: ``paper`` (:func:`projected_step`) or
    ``reference`` (:func:`reference_step`). Padding positions are never perturbed. Returns
    ℓ_s(f(x + ν), f(x)) with gradients to the parameters through both outputs, as R_s(θ)
    in eq. (1) depends on θ through both; 0, and ``skipped``, if the ascent or the term
    was not finite.

    ``ascent_forward`` (default ``forward``) runs the ascent passes; it may skip recording
    the parameters (:func:`without_parameter_grads`), which those passes never need.
    """
    update = ASCENT_STEPS[ascent]
    keep = mask.unsqueeze(-1).to(embeddings.dtype)
    target = clean_outputs.detach()
    base = embeddings.detach()
    noise = torch.randn(embeddings.shape, generator=generator, device=embeddings.device,
                        dtype=embeddings.dtype) * noise_std * keep
    grad = torch.zeros_like(base)
    finite = torch.ones((), dtype=torch.bool, device=base.device)
    for _ in range(steps):
        noise.requires_grad_(True)
        value = divergence((ascent_forward or forward)(base + noise), target)
        (grad,) = torch.autograd.grad(value, noise)
        # A non-finite gradient is zeroed rather than tested on the host (no sync): δ stays
        # finite, and the term is dropped below.
        finite = finite & torch.isfinite(grad).all()
        grad = torch.nan_to_num(grad * keep, nan=0.0, posinf=0.0, neginf=0.0)
        noise = update(noise.detach(), grad, epsilon, step_size, guard) * keep
    if ascent == "paper":
        noise = project_linf(noise, epsilon) * keep
    cosine = F.cosine_similarity(noise.flatten().float(), grad.flatten().float(), dim=0)
    loss = divergence(forward(embeddings + noise), clean_outputs)
    finite = finite & torch.isfinite(loss)
    # Multiplying by 0 drops the term; its inputs are finite, so no NaN reaches a gradient.
    return AdversarialResult(torch.nan_to_num(loss) * finite, noise, cosine.detach(), ~finite)


def without_parameter_grads(model: nn.Module,
                            forward: Callable[[torch.Tensor], torch.Tensor]
                            ) -> Callable[[torch.Tensor], torch.Tensor]:
    """``forward`` run with ``model``'s parameters out of the autograd graph: gradients
    still reach the input, nothing is kept for parameter gradients (a cheaper ascent pass)."""

    def run(inputs: torch.Tensor) -> torch.Tensor:
        trainable = [p for p in model.parameters() if p.requires_grad]
        for parameter in trainable:
            parameter.requires_grad_(False)
        try:
            return forward(inputs)
        finally:
            for parameter in trainable:
                parameter.requires_grad_(True)

    return run


def rng_replayer(device: torch.device) -> Callable[..., torch.Tensor]:
    """Capture the random state now; ``replay(fn, *args)`` runs ``fn`` from that state.

    Called just before the clean forward pass, it lets the adversarial passes draw the
    *same dropout masks* as the clean pass, so ℓ_s(f(x̃), f(x)) measures the effect of the
    perturbation rather than the difference between two dropout samples (which at
    ε = 1e-5 would swamp it). The outer random stream is left where it was.
    """
    cpu_state = torch.get_rng_state()
    cuda_state = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def replay(fn: Callable[..., torch.Tensor], *args, **kwargs) -> torch.Tensor:
        with torch.random.fork_rng(devices=[device] if cuda_state is not None else []):
            torch.set_rng_state(cpu_state)
            if cuda_state is not None:
                torch.cuda.set_rng_state(cuda_state, device)
            return fn(*args, **kwargs)

    return replay


def bregman_loss(student_outputs: torch.Tensor, teacher_outputs: torch.Tensor,
                 divergence: Divergence) -> torch.Tensor:
    """D_Breg(θ, θ̃_t) = ℓ_s(f(x; θ), f(x; θ̃_t)) for one batch (eqs. 2-3); the teacher's
    outputs carry no gradient, so only the student is pulled towards the teacher."""
    return divergence(student_outputs, teacher_outputs.detach())


# The lag 1/(1 - β) of the paper's late β = 0.999 is 1,000 updates. Its large GLUE runs
# (6 epochs at batch 32: MNLI 73.6k updates, QQP 68.2k, QNLI 19.6k, SST-2 12.6k) put that
# lag at 1.4%, 1.5%, 5.1% and 7.9% of the run; their geometric mean is 3%. The ``scaled``
# schedule keeps that share on runs of any length.
PAPER_LAG_FRACTION = 0.03

TEACHER_SCHEDULES = ("paper", "ramp", "scaled")


def teacher_beta(update: int, total_updates: int, early: float = 0.99, late: float = 0.999,
                 early_fraction: float = 0.1, schedule: str = "paper",
                 lag_fraction: float = PAPER_LAG_FRACTION) -> float:
    """β for teacher update number ``update`` (1-based) of ``total_updates``.

    - ``paper``: ``early`` for the first ``early_fraction`` of updates (t ≤ 0.1 T),
      ``late`` after (Appendix B).
    - ``ramp``: the paper's β capped by Mean Teacher's ramp, min(1 - 1/t, β_t) (Tarvainen
      and Valpola's released code), so that the teacher is the running mean of the
      student's weights θ_1 … θ_t until the EMA takes over; the start weights drop out at
      the first update.
    - ``scaled``: the ramp, then the constant β whose lag 1/(1 - β) is ``lag_fraction`` of
      the run (:data:`PAPER_LAG_FRACTION`, the paper's share on its long runs).
    """
    if schedule == "paper":
        return early if update <= early_fraction * total_updates else late
    ramp = 1.0 - 1.0 / update
    if schedule == "ramp":
        return min(ramp, teacher_beta(update, total_updates, early, late, early_fraction))
    if schedule == "scaled":
        return min(ramp, scaled_beta(total_updates, lag_fraction))
    raise ValueError(f"unknown teacher schedule {schedule!r}; one of {TEACHER_SCHEDULES}")


def teacher_start_share(updates: int, total_updates: int, early: float = 0.99,
                        late: float = 0.999, early_fraction: float = 0.1,
                        schedule: str = "paper",
                        lag_fraction: float = PAPER_LAG_FRACTION) -> float:
    """∏ β_t over the first ``updates`` teacher updates: the share of the start weights (and
    of the untrained heads) still in the teacher. A function of the schedule alone."""
    return math.prod(teacher_beta(t, total_updates, early, late, early_fraction, schedule,
                                  lag_fraction) for t in range(1, updates + 1))


def scaled_beta(total_updates: int, lag_fraction: float = PAPER_LAG_FRACTION) -> float:
    """The β whose lag 1/(1 - β) is ``lag_fraction`` of ``total_updates`` (at least one
    update: β = 0, the teacher is the student)."""
    lag = max(1.0, lag_fraction * total_updates)
    return 1.0 - 1.0 / lag


class MeanTeacher:
    """θ̃ ← (1 - β) θ + β θ̃, an exponential moving average of the whole model
    (encoder and heads; Algorithm 1, line 14). Never trained.

    ``dropout=True`` runs it as the student runs, in training mode: called under the
    student's replayed random state it draws the student's dropout masks, so
    D_Breg(θ, θ̃) = 0 when θ = θ̃, as eqs. (2)-(3) define it on the same f. ``False`` runs
    it in eval mode (no dropout): D_Breg then also measures the student's dropout noise.
    """

    def __init__(self, model: nn.Module, total_updates: int, early: float = 0.99,
                 late: float = 0.999, early_fraction: float = 0.1, dropout: bool = True,
                 schedule: str = "paper", lag_fraction: float = PAPER_LAG_FRACTION) -> None:
        if schedule not in TEACHER_SCHEDULES:
            raise ValueError(f"unknown teacher schedule {schedule!r}; one of {TEACHER_SCHEDULES}")
        self.model: nn.Module = copy.deepcopy(model).train(dropout)
        self.dropout = dropout
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.total_updates = max(1, total_updates)
        self.early, self.late, self.early_fraction = early, late, early_fraction
        self.schedule, self.lag_fraction = schedule, lag_fraction
        self.updates = 0
        # ∏ β_t so far: the share of the start weights (and of the untrained heads) still in
        # the teacher; logged, so that a reader sees whether the teacher left the start.
        self.start_share = 1.0

    def beta(self, update: int) -> float:
        return teacher_beta(update, self.total_updates, self.early, self.late,
                            self.early_fraction, self.schedule, self.lag_fraction)

    @torch.no_grad()
    def update(self, student: nn.Module) -> float:
        """One EMA step towards ``student``; returns the β used."""
        self.updates += 1
        beta = self.beta(self.updates)
        self.start_share *= beta
        for mine, theirs in zip(self.model.parameters(), student.parameters(), strict=True):
            mine.mul_(beta).add_(theirs.detach(), alpha=1.0 - beta)
        for mine, theirs in zip(self.model.buffers(), student.buffers(), strict=True):
            mine.copy_(theirs)
        return beta

    @torch.no_grad()
    def __call__(self, *args, **kwargs) -> torch.Tensor:
        self.model.train(self.dropout)
        return self.model(*args, **kwargs)

    def snapshot(self) -> dict:
        return {"model": self.model.state_dict(), "updates": self.updates}

    def restore(self, state: dict) -> None:
        self.updates = int(state["updates"])
        # a function of the schedule alone, so resumed runs need not have saved it
        self.start_share = teacher_start_share(
            self.updates, self.total_updates, self.early, self.late, self.early_fraction,
            self.schedule, self.lag_fraction)
        self.model.load_state_dict(state["model"])


def smart_adv_weights(smart: SmartConfig, tasks: dict[str, TaskDef]) -> dict[str, float]:
    """λ_s per task: the task's override, else the run's; 0 everywhere when SMART is off."""
    if not smart.enabled:
        return {name: 0.0 for name in tasks}
    return {name: smart.adv_weight if task.smart.adv_weight is None
            else task.smart.adv_weight for name, task in tasks.items()}


def build_teacher(model: torch.nn.Module, smart: SmartConfig, total_steps: int,
                  saved: dict[str, Any] | None = None, resumed: Path | None = None
                  ) -> MeanTeacher | None:
    """The mean teacher θ̃ of the Bregman term, over the run's ``total_steps`` updates;
    ``None`` when the run has no Bregman term. A run resumed from checkpoint ``resumed``
    continues its ``saved`` teacher."""
    if not smart.keeps_teacher:
        return None
    updates = total_steps // smart.teacher_update_every
    if smart.teacher_schedule == "scaled" and smart.teacher_lag_fraction * updates <= 1:
        log.warning(
            "the scaled teacher lags smart.teacher_lag_fraction %g of this run's %d teacher "
            "updates, under one update: the teacher is the student at every step, so the "
            "Bregman term (μ = %g) is 0 throughout; train for more than %d steps, or set "
            "smart.teacher_schedule=paper", smart.teacher_lag_fraction, updates,
            smart.bregman_weight,
            math.floor(1 / smart.teacher_lag_fraction) * smart.teacher_update_every)
    teacher = MeanTeacher(model, updates,
                          smart.teacher_beta_early, smart.teacher_beta_late,
                          smart.teacher_early_fraction, dropout=smart.teacher_dropout == "shared",
                          schedule=smart.teacher_schedule, lag_fraction=smart.teacher_lag_fraction)
    if resumed is not None:
        if saved is None:
            raise MtdnnError("the checkpoint has no SMART teacher, but this run keeps one",
                             file=resumed, key="resume", allowed="resume with the same smart.*")
        teacher.restore(saved)
    return teacher
