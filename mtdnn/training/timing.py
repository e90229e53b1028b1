"""When things happen in the training loop: what is due at a step (evaluation, checkpoints),
and the clock that counts training time without evaluation and checkpointing."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from mtdnn.config.train_config import TrainConfig
from mtdnn.runs.run_state import RunState


def due(every: int | None, step: int) -> bool:
    """Whether a periodic action set to every ``every`` steps falls on ``step``."""
    return bool(every) and step % every == 0


def checkpoint_due(config: TrainConfig, step: int, total_steps: int, epoch_end: bool
                   ) -> tuple[bool, bool]:
    """The one rule for (save ``last``, evaluate on dev) after ``step``: evaluate at the
    last step, every ``eval_every_steps`` and, with ``eval_every_epoch``, at an epoch's end;
    save whenever evaluating, at every epoch's end (so a run stays resumable) and every
    ``save_every_steps``."""
    evaluate = (step >= total_steps or due(config.eval_every_steps, step)
                or (epoch_end and config.eval_every_epoch))
    return evaluate or epoch_end or due(config.save_every_steps, step), evaluate


class TrainingClock:
    """This process's training time and examples since the run (re)started, evaluation and
    checkpointing excluded; :meth:`count` brings the state's totals up to now, so that a
    resumed run reports its whole cost."""

    def __init__(self, state: RunState) -> None:
        self.started, self.outside, self.examples = time.perf_counter(), 0.0, 0
        self.seconds_before, self.examples_before = state.train_seconds, state.train_examples

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count as training."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.outside += time.perf_counter() - started

    def count(self, state: RunState) -> None:
        state.train_seconds = (self.seconds_before + time.perf_counter() - self.started
                               - self.outside)
        state.train_examples = self.examples_before + self.examples
