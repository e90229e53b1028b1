"""SMART's divergences ℓ_s (Jiang et al. 2020, Section 3.1), by the shape of a head's
outputs: the symmetric KL between two class distributions, the squared error between two
scores, and the symmetric KL per position averaged over the positions a mask keeps (the
labelled tokens of a token-labelling batch). Each task type picks its own
(:mod:`mtdnn.tasks.types`); :mod:`mtdnn.modeling.smart` applies them.

Every divergence is computed in float32 and averages over the batch's examples (or its
kept positions), so λ_s means the same whatever the batch size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Divergence = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _pointwise_symmetric_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(P‖Q) + KL(Q‖P) between the softmaxes over the last dimension, per position."""
    log_p = F.log_softmax(p_logits.float(), dim=-1)
    log_q = F.log_softmax(q_logits.float(), dim=-1)
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1)


def symmetric_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """ℓ_s(P, Q) = KL(P‖Q) + KL(Q‖P) between the softmaxes of two logit batches, averaged
    over the batch (Section 3.1, classification). Computed in float32 from log-probabilities.
    A ranking task's logits are its candidates' scores: the divergence is then between the
    two distributions over each group's candidates."""
    return _pointwise_symmetric_kl(p_logits, q_logits).mean()


def masked_symmetric_kl(p_logits: torch.Tensor, q_logits: torch.Tensor,
                        keep: torch.Tensor) -> torch.Tensor:
    """The symmetric KL at each position of ``[B, L, C]`` logits, averaged over the positions
    where ``keep`` ``[B, L]`` is true (padding and unlabelled sub-words do not count); 0 when
    it keeps none."""
    per_position = _pointwise_symmetric_kl(p_logits, q_logits)
    keep = keep.to(per_position.dtype)
    return (per_position * keep).sum() / keep.sum().clamp_min(1.0)


def squared_error(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """ℓ_s(p, q) = (p - q)², averaged over the batch (Section 3.1, regression)."""
    return (p.float() - q.float()).pow(2).reshape(p.shape[0], -1).sum(-1).mean()
