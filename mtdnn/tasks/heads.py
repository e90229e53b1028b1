"""The heads the task types put on the shared encoder, and what the encoder hands them.

Every head is MT-DNN's: dropout, then a linear layer, on what its type reads of the
encoder's output (:class:`Encoded`): the pooled first-token vector (one row per example),
or every token's hidden state (one row per token). A task type builds its head in
``TaskType.head`` (:mod:`mtdnn.tasks.task_type`); this module is imported only when a
model is built, so reading task definitions never loads torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Encoded:
    """One encoder pass, as every head of the model may read it."""

    hidden: torch.Tensor  # [B, L, H]: each token's last hidden state
    pooled: torch.Tensor  # [B, H]: the pooler output where the encoder has one, else hidden[:, 0]
    mask: torch.Tensor  # [B, L]: 1 on real tokens, 0 on padding


class PooledHead(nn.Module):
    """Dropout → linear on the pooled representation: ``[B, width]``."""

    def __init__(self, hidden_size: int, width: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(hidden_size, width)

    def forward(self, encoded: Encoded, **extras: torch.Tensor) -> torch.Tensor:
        return self.proj(self.dropout(encoded.pooled))


class TokenHead(PooledHead):
    """Dropout → linear on every token's hidden state: ``[B, L, width]``."""

    def forward(self, encoded: Encoded, **extras: torch.Tensor) -> torch.Tensor:
        return self.proj(self.dropout(encoded.hidden))


# What a padded candidate scores: its probability under a group's softmax is exactly 0 in
# float32 and bf16, and the difference of two such scores stays finite.
ABSENT_SCORE = -1e4


class GroupScoreHead(PooledHead):
    """One score per (group, candidate) pair, from the pooled vector of each candidate:
    ``[groups, candidates]``, the candidates a group lacks scored :data:`ABSENT_SCORE`.
    The batch's rows are the groups' candidates in order; ``candidate_mask``
    ``[groups, candidates]`` says which are real."""

    def __init__(self, hidden_size: int, dropout: float) -> None:
        super().__init__(hidden_size, 1, dropout)

    def forward(self, encoded: Encoded, candidate_mask: torch.Tensor | None = None,
                **extras: torch.Tensor) -> torch.Tensor:
        scores = super().forward(encoded).squeeze(-1)
        if candidate_mask is None:  # one row per candidate, e.g. scoring pairs alone
            return scores.unsqueeze(-1)
        scores = scores.reshape(candidate_mask.shape)
        return scores.masked_fill(~candidate_mask.bool(), ABSENT_SCORE)
