"""The training loop's own state: its counters, dev history and the losses gathered since
the last log line. The trainer keeps it; ``mtdnn.runs.checkpoint`` saves it in ``last`` and
restores it on resume, so that a resumed loop goes on where it stopped."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunState:
    """Counters, dev history and not-yet-logged losses of one run."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # complete epochs
    position: int = 0  # minibatches of the current epoch consumed
    micro: int = 0  # minibatches consumed in all (gradient accumulation)
    best_score: float = -float("inf")
    adv_skipped: int = 0
    nonfinite_skipped: int = 0
    evals: list[dict[str, Any]] = field(default_factory=list)
    running: defaultdict = field(default_factory=lambda: defaultdict(list))
    sampler_state: dict[str, Any] = field(default_factory=dict)
    # Training time and examples up to ``step``, over every process that trained this run
    # (evaluation and checkpointing excluded), so that a resumed run reports its whole cost.
    train_seconds: float = 0.0
    train_examples: int = 0
    # Who trained which steps: one entry per start or resume (``from_step``, the code
    # version, the machine), so that a run resumed under other code or on another machine
    # says so. A run saved before this was kept starts its list at the step it resumed from.
    trained_by: list[dict[str, Any]] = field(default_factory=list)
