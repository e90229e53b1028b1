"""Multi-task minibatch schedules. Every minibatch holds examples of one task.

A sampler plans one epoch at a time as a list of :class:`BatchRef` (task, example
indices), drawing all randomness from the ``numpy.random.Generator`` it was given, so a
seed fixes the whole schedule and the generator's state at an epoch's start is all that
resuming needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mtdnn.config import SamplerConfig


@dataclass(frozen=True)
class BatchRef:
    """Which examples of which task make up one minibatch."""

    task: str
    indices: np.ndarray


def _shuffled_batches(size: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(size)
    return [order[i:i + batch_size] for i in range(0, size, batch_size)]


def _num_batches(sizes: dict[str, int], batch_size: int) -> int:
    return sum(-(-n // batch_size) for n in sizes.values())


class Sampler(Protocol):
    rng: np.random.Generator
    num_batches: int  # minibatches per epoch

    def plan_epoch(self) -> list[BatchRef]: ...


class ProportionalSampler:
    """MT-DNN's schedule (Liu et al. 2019, Algorithm 1).

    Each epoch visits every batch of every task once: each task's examples are shuffled
    and cut into batches, then all batches of all tasks are shuffled together. A task is
    therefore drawn in proportion to its number of batches, and both the batch order within
    a task and the task interleaving change every epoch.
    """

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator) -> None:
        self.sizes, self.batch_size, self.rng = dict(sizes), batch_size, rng
        self.num_batches = _num_batches(self.sizes, batch_size)

    def plan_epoch(self) -> list[BatchRef]:
        plan = [BatchRef(task, batch) for task, size in self.sizes.items()
                for batch in _shuffled_batches(size, self.batch_size, self.rng)]
        order = self.rng.permutation(len(plan))
        return [plan[i] for i in order]


class TemperatureSampler:
    """Temperature sampling: task t is drawn with probability p_t ∝ n_t^(1/T).

    T = 1 is proportional to dataset size, T → ∞ uniform. An epoch is ``steps_per_epoch``
    draws (default: the total number of batches of all tasks). Each task reads its examples
    in a shuffled order and reshuffles when it runs out, so no example repeats before every
    example of its task has been seen.
    """

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator,
                 temperature: float = 1.0, steps_per_epoch: int | None = None) -> None:
        self.sizes, self.batch_size, self.rng = dict(sizes), batch_size, rng
        self.tasks = list(self.sizes)
        counts = np.array([self.sizes[t] for t in self.tasks], dtype=np.float64)
        weights = counts ** (1.0 / temperature)
        self.probabilities = weights / weights.sum()
        self.num_batches = steps_per_epoch or _num_batches(self.sizes, batch_size)
        self._queues: dict[str, list[np.ndarray]] = {t: [] for t in self.tasks}

    def _next_batch(self, task: str) -> np.ndarray:
        queue = self._queues[task]
        if not queue:
            queue.extend(_shuffled_batches(self.sizes[task], self.batch_size, self.rng))
        return queue.pop(0)

    def plan_epoch(self) -> list[BatchRef]:
        draws = self.rng.choice(len(self.tasks), size=self.num_batches, p=self.probabilities)
        return [BatchRef(self.tasks[i], self._next_batch(self.tasks[i])) for i in draws]

    def state_dict(self) -> dict:
        return {"queues": {t: [b.tolist() for b in q] for t, q in self._queues.items()}}

    def load_state_dict(self, state: dict) -> None:
        self._queues = {t: [np.array(b, dtype=np.int64) for b in q]
                        for t, q in state["queues"].items()}


SamplerFactory = Callable[[dict[str, int], int, np.random.Generator, SamplerConfig], Sampler]
SAMPLERS: dict[str, SamplerFactory] = {
    "proportional": lambda sizes, batch_size, rng, config: ProportionalSampler(
        sizes, batch_size, rng),
    "temperature": lambda sizes, batch_size, rng, config: TemperatureSampler(
        sizes, batch_size, rng, config.temperature, config.steps_per_epoch),
}


def build_sampler(config: SamplerConfig, sizes: dict[str, int], batch_size: int,
                  seed: int) -> Sampler:
    """The sampler ``config.kind`` over tasks of ``sizes`` examples, seeded by ``seed``."""
    return SAMPLERS[config.kind](sizes, batch_size, np.random.default_rng(seed), config)
