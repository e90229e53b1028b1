"""Evaluating and saving while a run trains: the dev evaluation that decides which checkpoint
is ``best``, and the resumable ``last`` checkpoint (``mtdnn.runs.checkpoint`` writes them)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from mtdnn.inference.batched import evaluate_tasks
from mtdnn.runs.checkpoint import save_last
from mtdnn.tasks.metrics import score_of

if TYPE_CHECKING:
    from mtdnn.data.tokenized import TaskSplits
    from mtdnn.modeling.model import MultiTaskModel
    from mtdnn.modeling.smart import MeanTeacher
    from mtdnn.runs.run_dir import RunDir
    from mtdnn.runs.run_state import RunState
    from mtdnn.runs.trackers import Trackers
    from mtdnn.training.distributed import Distributed

log = logging.getLogger(__name__)


class Checkpointer:
    """:meth:`save`: evaluate on the dev sets (when asked), log the scores (trackers,
    ``metrics.jsonl``, ``state.evals``), then save ``last``, copied to ``best`` when
    ``best_metric`` improved and to ``checkpoints/step-<N>`` when ``keep_last_n`` copies
    are kept. Every rank calls it: the process that writes the run (rank 0) evaluates and
    saves, the others wait for it."""

    def __init__(self, run: RunDir, tokenizer: Any, config_yaml: str, trackers: Trackers,
                 data: dict[str, TaskSplits], eval_batch_size: int, device: torch.device,
                 amp_dtype: torch.dtype | None, best_metric: str, keep_last_n: int | None,
                 distributed: Distributed) -> None:
        self.run, self.tokenizer, self.config_yaml = run, tokenizer, config_yaml
        self.trackers, self.data = trackers, data
        self.eval_batch_size, self.device, self.amp_dtype = eval_batch_size, device, amp_dtype
        self.best_metric, self.keep_last_n = best_metric, keep_last_n
        self.distributed = distributed

    def save(self, model: MultiTaskModel, state: RunState,
             training_state: Callable[[], dict[str, Any]], teacher: MeanTeacher | None,
             evaluate: bool) -> None:
        """Rank 0 evaluates and saves; the other ranks wait. ``training_state``: what
        resuming needs besides the weights, taken after the evaluation (whose scores it
        holds)."""
        if self.distributed.is_main:
            self.evaluate_and_save(model, state, training_state, teacher, evaluate)
        self.distributed.barrier()

    def evaluate_and_save(self, model: MultiTaskModel, state: RunState,
                          training_state: Callable[[], dict[str, Any]],
                          teacher: MeanTeacher | None, evaluate: bool) -> None:
        info: dict[str, Any] = {"step": state.step, "epoch": state.epoch, "metrics": None}
        is_best = False
        if evaluate:
            metrics, entropy = self.evaluate(model, state.step)
            score = score_of(metrics, self.best_metric) if metrics else -state.step
            is_best = score > state.best_score
            state.best_score = max(state.best_score, score)
            entry = {"kind": "eval", "step": state.step, "epoch": state.epoch,
                     "metrics": metrics, "entropy": entropy, "score": score, "best": is_best}
            self.trackers.record(entry)
            state.evals.append(entry)
            log.info("step %d epoch %d dev %s%s", state.step, state.epoch, json.dumps(metrics),
                     " (best)" if is_best else "")
            info.update(metrics=metrics, score=score)
        save_last(self.run, model, self.tokenizer, self.config_yaml, info, training_state(),
                  teacher, is_best=is_best, keep_last_n=self.keep_last_n if evaluate else None)

    def evaluate(self, model: MultiTaskModel, step: int
                 ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """Every task's dev metrics and mean prediction entropy, also to the trackers."""
        metrics, entropy = evaluate_tasks(model, self.data, self.eval_batch_size, self.device,
                                          self.amp_dtype)
        for task, values in metrics.items():
            for name, value in values.items():
                self.trackers.add_scalar(f"eval/{task}/{name}", value, step)
        for task, value in entropy.items():
            self.trackers.add_scalar(f"eval/{task}/entropy", value, step)
        return metrics, entropy
