"""Multi-task schedules. Every minibatch holds examples of one task.

A sampler plans one epoch at a time as a list of *steps*; a step is a tuple of
:class:`BatchRef` (task, example indices) whose losses make one optimizer update. MT-DNN's
proportional schedule and the temperature family put one batch in a step; the round-robin
schedules of the BERTriad paper (Appendix A) can put one batch of several tasks in a step,
which is what gradient surgery (PCGrad) needs. All randomness comes from the
``numpy.random.Generator`` the sampler was given, so a seed fixes the whole schedule, and the
generator's state (plus the task streams) at an epoch's start is all that resuming needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mtdnn.config.train_config import SamplerConfig

if TYPE_CHECKING:
    from mtdnn.data.tokenized import TaskSplits


@dataclass(frozen=True)
class BatchRef:
    """Which examples of which task make up one minibatch."""

    task: str
    indices: np.ndarray


Step = tuple[BatchRef, ...]


MEGABATCH = 50  # group_by_length sorts within chunks of at most this many batches


def _shuffled_batches(size: int, batch_size: int, rng: np.random.Generator,
                      lengths: np.ndarray | None = None) -> list[np.ndarray]:
    """A task's examples shuffled and cut into batches. With ``lengths``, examples of
    similar length share a batch (less padding): the shuffled order is cut into chunks of
    ``size // (4 * batch_size)`` batches (1 to ``MEGABATCH``, the rule of HF's
    ``LengthGroupedSampler``), each chunk sorted by length and cut, and the batches
    shuffled. Small tasks thus get small chunks: sorting a whole small task would give the
    same batches every epoch, and that measurably cost dev accuracy (docs/results.md)."""
    order = rng.permutation(size)
    if lengths is None:
        return [order[i:i + batch_size] for i in range(0, size, batch_size)]
    chunk = min(MEGABATCH, max(1, size // (4 * batch_size))) * batch_size
    batches = []
    for start in range(0, size, chunk):
        part = order[start:start + chunk]
        part = part[np.argsort(-lengths[part], kind="stable")]
        batches += [part[i:i + batch_size] for i in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _batches_per_task(sizes: dict[str, int], batch_size: int) -> dict[str, int]:
    return {task: -(-n // batch_size) for task, n in sizes.items()}


class Sampler:
    """A schedule: ``plan_epoch()`` plans the next epoch's steps from ``rng``.

    ``snapshot()`` at an epoch's start is all that resuming needs: the generator's state
    (plus, in subclasses, any queues or counters that carry over between epochs).
    """

    rng: np.random.Generator
    num_steps: int  # steps per epoch

    def plan_epoch(self) -> list[Step]:
        raise NotImplementedError

    def snapshot(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def restore(self, state: dict) -> None:
        if "extra" in state:  # checkpoints written before samplers owned their state
            state = {**state, **state["extra"]}
        self.rng.bit_generator.state = state["rng"]


class TaskStreams(Sampler):
    """Each task's batches in a shuffled order, reshuffled whenever a task runs out, so no
    example repeats before every example of its task has been seen."""

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator,
                 lengths: dict[str, np.ndarray] | None = None) -> None:
        self.sizes, self.batch_size, self.rng = dict(sizes), batch_size, rng
        self.lengths = lengths or {}
        self.queues: dict[str, list[np.ndarray]] = {t: [] for t in sizes}

    def next(self, task: str) -> BatchRef:
        queue = self.queues[task]
        if not queue:
            queue.extend(_shuffled_batches(self.sizes[task], self.batch_size, self.rng,
                                           self.lengths.get(task)))
        return BatchRef(task, queue.pop(0))

    def snapshot(self) -> dict:
        return {**super().snapshot(),
                "queues": {t: [b.tolist() for b in q] for t, q in self.queues.items()}}

    def restore(self, state: dict) -> None:
        super().restore(state)
        state = {**state, **state.get("extra", {})}
        self.queues = {t: [np.array(b, dtype=np.int64) for b in q]
                       for t, q in state["queues"].items()}


class ProportionalSampler(Sampler):
    """MT-DNN's schedule (Liu et al. 2019, Algorithm 1).

    Each epoch visits every batch of every task once: each task's examples are shuffled
    and cut into batches, then all batches of all tasks are shuffled together. A task is
    therefore drawn in proportion to its number of batches, and both the batch order within
    a task and the task interleaving change every epoch.
    """

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator,
                 lengths: dict[str, np.ndarray] | None = None) -> None:
        self.sizes, self.batch_size, self.rng = dict(sizes), batch_size, rng
        self.lengths = lengths or {}
        self.num_steps = sum(_batches_per_task(sizes, batch_size).values())

    def plan_epoch(self) -> list[Step]:
        plan = [(BatchRef(task, batch),) for task, size in self.sizes.items()
                for batch in _shuffled_batches(size, self.batch_size, self.rng,
                                               self.lengths.get(task))]
        order = self.rng.permutation(len(plan))
        return [plan[i] for i in order]


class TemperatureSampler(TaskStreams):
    """Task t is drawn with probability p_t ∝ n_t^(1/T) (n_t = its number of examples).

    T = 1 is proportional to dataset size; ``uniform`` is the limit T → ∞. An epoch is
    ``steps_per_epoch`` draws (default: the total number of batches of all tasks).
    """

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator,
                 temperature: float = 1.0, steps_per_epoch: int | None = None,
                 lengths: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(sizes, batch_size, rng, lengths)
        self.tasks = list(self.sizes)
        self.exponent = 1.0 / temperature
        self.num_steps = steps_per_epoch or sum(_batches_per_task(sizes, batch_size).values())

    @property
    def probabilities(self) -> np.ndarray:
        weights = np.array([self.sizes[t] for t in self.tasks], dtype=np.float64) ** self.exponent
        return weights / weights.sum()

    def plan_epoch(self) -> list[Step]:
        draws = self.rng.choice(len(self.tasks), size=self.num_steps, p=self.probabilities)
        return [(self.next(self.tasks[i]),) for i in draws]


class AnnealedSampler(TemperatureSampler):
    """Temperature sampling whose exponent α in p_t ∝ n_t^α falls linearly from 1
    (proportional) in the first epoch to 0 (uniform) in the last (Stickland & Murray 2019
    anneal towards uniform; here over the run's ``epochs``)."""

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator,
                 epochs: int, steps_per_epoch: int | None = None,
                 lengths: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(sizes, batch_size, rng, 1.0, steps_per_epoch, lengths)
        self.epochs, self.epoch = max(1, epochs), 0

    def plan_epoch(self) -> list[Step]:
        self.exponent = 1.0 - self.epoch / max(1, self.epochs - 1)
        self.epoch += 1
        return super().plan_epoch()

    def snapshot(self) -> dict:
        return {**super().snapshot(), "epoch": self.epoch}

    def restore(self, state: dict) -> None:
        super().restore(state)
        self.epoch = {**state, **state.get("extra", {})}["epoch"]


class CycleRoundRobin(TaskStreams):
    """BERTriad's cycle round-robin: every step holds one batch of every task; an epoch is
    as many steps as the largest task has batches, the smaller tasks cycling."""

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator,
                 lengths: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(sizes, batch_size, rng, lengths)
        self.num_steps = max(_batches_per_task(sizes, batch_size).values())

    def plan_epoch(self) -> list[Step]:
        return [tuple(self.next(task) for task in self.sizes) for _ in range(self.num_steps)]


class ShuffleRoundRobin(TaskStreams):
    """BERTriad's shuffle round-robin: each step one batch of a uniformly chosen task; an
    epoch is as many steps as the largest task has batches."""

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator,
                 lengths: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(sizes, batch_size, rng, lengths)
        self.tasks = list(sizes)
        self.num_steps = max(_batches_per_task(sizes, batch_size).values())

    def plan_epoch(self) -> list[Step]:
        draws = self.rng.integers(len(self.tasks), size=self.num_steps)
        return [(self.next(self.tasks[i]),) for i in draws]


class StochasticRoundRobin(Sampler):
    """BERTriad's "smart" round-robin (Appendix A, Algorithm 1); renamed here so that it is
    not taken for SMART, the regulariser (configs that say ``smart`` still read).

    An epoch is M steps, M = the largest task's number of batches. At step i each task t
    with n_t batches joins with probability n_t / M, and is forced to join when its
    remaining batches equal the remaining steps; it never joins once its batches are used.
    So every batch of every task is seen exactly once per epoch, the largest task in every
    step, and a step may hold several tasks (for gradient surgery).
    """

    def __init__(self, sizes: dict[str, int], batch_size: int, rng: np.random.Generator,
                 lengths: dict[str, np.ndarray] | None = None) -> None:
        self.sizes, self.batch_size, self.rng = dict(sizes), batch_size, rng
        self.lengths = lengths or {}
        self.batches = _batches_per_task(sizes, batch_size)
        self.num_steps = max(self.batches.values())

    def plan_epoch(self) -> list[Step]:
        queues = {t: _shuffled_batches(n, self.batch_size, self.rng, self.lengths.get(t))
                  for t, n in self.sizes.items()}
        used = dict.fromkeys(self.sizes, 0)
        plan = []
        for step in range(self.num_steps):
            remaining_steps = self.num_steps - step
            refs = []
            for task, total in self.batches.items():
                left = total - used[task]
                draw = self.rng.random()
                if left > 0 and (left >= remaining_steps or draw <= total / self.num_steps):
                    refs.append(BatchRef(task, queues[task][used[task]]))
                    used[task] += 1
            plan.append(tuple(refs))
        return plan


SamplerFactory = Callable[..., Sampler]
SAMPLERS: dict[str, SamplerFactory] = {
    "proportional": lambda sizes, bs, rng, config, epochs, lengths: ProportionalSampler(
        sizes, bs, rng, lengths),
    "temperature": lambda sizes, bs, rng, config, epochs, lengths: TemperatureSampler(
        sizes, bs, rng, config.temperature, config.steps_per_epoch, lengths),
    "uniform": lambda sizes, bs, rng, config, epochs, lengths: TemperatureSampler(
        sizes, bs, rng, float("inf"), config.steps_per_epoch, lengths),
    "annealed": lambda sizes, bs, rng, config, epochs, lengths: AnnealedSampler(
        sizes, bs, rng, epochs, config.steps_per_epoch, lengths),
    "cycle": lambda sizes, bs, rng, config, epochs, lengths: CycleRoundRobin(
        sizes, bs, rng, lengths),
    "shuffle": lambda sizes, bs, rng, config, epochs, lengths: ShuffleRoundRobin(
        sizes, bs, rng, lengths),
    "stochastic_round_robin": lambda sizes, bs, rng, config, epochs, lengths:
        StochasticRoundRobin(sizes, bs, rng, lengths),
}


def training_sampler(config: SamplerConfig, data: dict[str, TaskSplits], batch_size: int,
                     seed: int, epochs: int) -> Sampler:
    """The run's sampler (its ``sampler`` section) over the training splits of ``data``."""
    lengths = {t: np.array([len(ids) for ids in d.train.dataset["input_ids"]])
               for t, d in data.items()} if config.group_by_length else None
    return build_sampler(config, {t: len(d.train) for t, d in data.items()}, batch_size, seed,
                         epochs, lengths)


def build_sampler(config: SamplerConfig, sizes: dict[str, int], batch_size: int, seed: int,
                  epochs: int = 1, lengths: dict[str, np.ndarray] | None = None) -> Sampler:
    """The sampler ``config.kind`` over tasks of ``sizes`` examples, seeded by ``seed``;
    with ``config.group_by_length``, batches group examples of similar ``lengths``."""
    grouped = lengths if config.group_by_length else None
    return SAMPLERS[config.kind](sizes, batch_size, np.random.default_rng(seed), config, epochs,
                                grouped)
