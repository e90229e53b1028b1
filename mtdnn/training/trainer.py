"""The training recipe: the multi-task stage and per-task fine-tuning are the same recipe.

``train(config)`` sets a :class:`TrainingRecipe` up and runs it. Read top to bottom,
:meth:`TrainingRecipe.train` is the MT-DNN recipe: take the epoch's plan of mixed-task
steps; for each step, the loss of each minibatch (:func:`mtdnn.modeling.objective.batch_loss`: task
loss + λ_s R_s + μ D_Breg), backward, then clip, step, schedule, teacher update; log; and
evaluate and save when the config's ``checkpoint_due`` says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from mtdnn.config.train_config import TrainConfig
from mtdnn.data.sampling import Step, training_sampler
from mtdnn.data.sources import canonical_files
from mtdnn.data.tokenized import get_batch, load_task_data
from mtdnn.files import atomic_write_text
from mtdnn.modeling.gradient_surgery import conflict_rates, pcgrad, put_gradients, take_gradients
from mtdnn.modeling.model import build_model, prepare_for_training
from mtdnn.modeling.objective import batch_loss
from mtdnn.modeling.precision import AMP_DTYPES, autocast_context, resolve_precision
from mtdnn.modeling.smart import build_teacher, smart_adv_weights
from mtdnn.runs.checkpoint import training_state
from mtdnn.runs.provenance import this_process
from mtdnn.runs.randomness import seeded
from mtdnn.runs.run_dir import RunDir, plan_run_dir
from mtdnn.runs.run_log import EarlyLines, RunLog, attach_run_log
from mtdnn.runs.run_state import RunState
from mtdnn.runs.trackers import Trackers
from mtdnn.tasks.metrics import check_best_metric
from mtdnn.tasks.task_def import select_tasks
from mtdnn.training.checkpointing import Checkpointer
from mtdnn.training.distributed import Distributed, shutdown, start_distributed
from mtdnn.training.metric_log import MetricLog
from mtdnn.training.optimization import Updater, build_optimization
from mtdnn.training.resume import start_checkpoint

log = logging.getLogger(__name__)


def rank_share(rows: int, rank: int, world_size: int) -> tuple[slice, float]:
    """A rank's contiguous share of a minibatch of ``rows`` rows, and its weight (its
    share of the rows: the loss weights below make the gradients summed over ranks the
    whole minibatch's). A rank left without rows (a minibatch smaller than the world) runs
    the first row with weight 0, so that every rank reduces the same set of gradients."""
    bounds = np.linspace(0, rows, world_size + 1).round().astype(int)
    start, stop = int(bounds[rank]), int(bounds[rank + 1])
    if stop == start:
        return slice(0, 1), 0.0
    return slice(start, stop), (stop - start) / rows


def train(config: TrainConfig) -> dict[str, Any]:
    """Run training as configured; returns the best and last dev metrics and paths."""
    recipe = TrainingRecipe(config)
    recipe.early = EarlyLines()  # train.log is written once the run folder is
    try:
        recipe.setup()
        return recipe.train()
    except KeyboardInterrupt:
        raise RunDir(Path(config.output_dir)).interrupted() from None
    finally:  # also after a failure: detach the run's log file, leave the process group
        recipe.early.detach()
        if recipe.run_log is not None:
            recipe.run_log.detach()
        if recipe.distributed is not None:
            # DDP's reducer holds the process group: freed after the group is destroyed
            # (when the process exits), it can hang in gloo's teardown, so it goes first.
            recipe.ddp = None
            shutdown(recipe.distributed)


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


class TrainingRecipe:
    """Multi-task fine-tuning with SMART, in torchtune's shape: ``setup()``, then ``train()``.

    Features, and what each costs:
    - mixed-task minibatches from a seeded sampler (MT-DNN's proportional schedule, the
      temperature family, round-robin schedules that put several tasks in one step);
    - SMART per task (R_s: one ascent pass and one adversarial pass per batch, ~2.7× a
      plain step; the Bregman term: one teacher forward and an EMA update);
    - PCGrad in steps with several tasks: one backward per task instead of one;
    - gradient accumulation, bf16/fp16 autocast, ``torch.compile`` (slow to start on CPU);
    - several processes under ``torchrun`` (gradients summed across ranks);
    - exact resume from ``last``: weights, optimizer, scheduler, scaler, teacher, sampler,
      RNG and counters (``mtdnn.runs.checkpoint``).
    Values reach the host only when logged, except one check per update: a non-finite
    gradient norm skips the update (and names the task whose loss was not finite).
    """

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.distributed: Distributed | None = None
        self.run_log: RunLog | None = None
        self.early: EarlyLines | None = None
        self.ddp: torch.nn.Module | None = None

    # -- setup ------------------------------------------------------------------------------

    def setup(self) -> None:
        """Check everything, then build; the run folder is written last, so a failed start
        leaves nothing that looks like a run (and an old run is replaced only then)."""
        config = self.config
        self.distributed = start_distributed(config)
        self.main, self.device = self.distributed.is_main, self.distributed.device
        self.tasks = select_tasks(config)
        start = start_checkpoint(config, self.tasks)  # read and checked before anything is built
        precision = resolve_precision(config.precision, self.device, config.smart)
        # The resolved precision is what config.yaml records (and what a resume must match).
        self.config = config = dataclasses.replace(config, precision=precision)
        self.amp_dtype = AMP_DTYPES[precision]
        log.info("device %s, precision %s", self.device, precision)
        self.planned = plan_run_dir(config, start.resumed)
        self.trackers = Trackers(config.report_to, self.planned.run, self.planned.settings)
        self.surgery_rng = np.random.default_rng(config.seed)  # PCGrad's projection order
        # Setup draws from the run's seed (fresh heads, each rank's masks); a resumed run
        # then goes on from the generators it saved.
        with seeded(config.seed, start.saved.get("rng"), (self.surgery_rng,)):
            self.model, self.tokenizer = build_model(self.tasks, encoder_dir=start.encoder_dir,
                                                     heads=start.heads, config=config)
            prepare_for_training(self.model, self.tokenizer, config, self.tasks, self.device)
            self.distributed.broadcast_parameters(self.model)
            torch.manual_seed(config.seed + self.distributed.rank)  # each rank its own masks
            with self.distributed.main_first():  # rank 0 fills the data cache, others read it
                files = canonical_files(config, self.tasks)
                self.data = load_task_data(config, self.tasks, self.tokenizer, files)
            check_best_metric(config.best_metric, self.tasks,
                              [t for t in self.tasks if self.data[t].dev is not None])
            self.sampler = training_sampler(config.sampler, self.data, config.batch_size,
                                            config.seed, config.epochs)
            self.state = start.run or RunState(sampler_state=self.sampler.snapshot())
            self.accum = config.optimizer.grad_accum_steps
            self.total_steps = config.total_steps(self.sampler.num_steps)
            self.updater = Updater(*build_optimization(
                self.model, config.optimizer, self.total_steps, precision, start.saved,
                start.extended), config.optimizer.max_grad_norm, self.distributed, self.planned.run)
            self.adv_weights = smart_adv_weights(config.smart, self.tasks)
            self.teacher = build_teacher(self.model, config.smart, self.total_steps,
                                         start.teacher, start.resumed)
            # DDP's all-reduce fits a step of one forward and one backward; SMART's R_s and
            # PCGrad do not, so their runs sum the gradients by hand (training.distributed).
            hand_summed = any(self.adv_weights.values()) or config.pcgrad
            self.ddp = self.distributed.wrap(self.model, hand_summed)
            # rank 0 writes the run folder and its log; the other ranks only name the folder
            self.run = self.planned.start() if self.main else self.planned.run
            self.run_log = attach_run_log(self.planned, config, self.early) if self.main else None
            self.metric_log = MetricLog(self.trackers, self.run, self.distributed,
                                        self.total_steps, config.log_every_steps,
                                        config.progress_bar)
            self.checkpointer = Checkpointer(self.run, self.tokenizer, self.planned.config_yaml,
                                             self.trackers, self.data, config.eval_batch_size,
                                             self.device, self.amp_dtype, config.best_metric,
                                             config.keep_last_n, self.distributed)
        self.state.trained_by.append(this_process(from_step=self.state.step))
        self.stopped_early, self.resumed_from_step = False, self.state.step
        self.clock = TrainingClock(self.state)
        if config.compile:
            # After the teacher's copy: the compiled forward belongs to the student alone.
            self.model.compile_encoder()

    # -- the loop ---------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Run every remaining step; returns the run's summary."""
        progress = tqdm(total=self.total_steps, initial=self.state.step,
                        disable=not (self.config.progress_bar and self.main), desc="train")
        # Log lines go above the bar (not through it), so that the bar is drawn once.
        with logging_redirect_tqdm() if not progress.disable else contextlib.nullcontext():
            self.train_steps(progress)
        progress.close()
        return self.cleanup()

    def train_steps(self, progress: tqdm) -> None:
        """The steps left, each logged, evaluated and saved when due."""
        config, state, model = self.config, self.state, self.model
        model.train()
        while state.step < self.total_steps and not self.stopped_early:
            self.sampler.restore(state.sampler_state)  # the epoch's start
            plan = self.sampler.plan_epoch()
            for refs in plan[state.position:]:
                state.position += 1
                losses = self.backward(refs)
                state.micro += 1
                stepped = state.micro % self.accum == 0 and \
                    self.updater.step(model, losses, state)
                if stepped and self.teacher is not None and \
                        state.step % config.smart.teacher_update_every == 0:
                    self.teacher.update(model)
                epoch_end = state.position == len(plan)
                if epoch_end:
                    state.epoch, state.position = state.epoch + 1, 0
                    state.sampler_state = self.sampler.snapshot()
                if stepped:
                    progress.update(1)
                    if self.metric_log.due(state.step):
                        self.metric_log.log(state, progress, self.updater.lr,
                                            self.updater.grad_norm, self.teacher_start_share)
                if stepped or epoch_end:
                    save, evaluate = config.checkpoint_due(state.step, self.total_steps,
                                                           epoch_end)
                    if save:
                        with self.clock.paused():
                            self.clock.count(state)
                            self.checkpointer.save(model, state, self.resume_state,
                                                   self.teacher, evaluate)
                    self.stopped_early = evaluate and self.no_progress()
                if state.step >= self.total_steps or self.stopped_early:
                    break

    def backward(self, refs: Step) -> list[tuple[str, torch.Tensor]]:
        """Every minibatch of one step: loss, backward (with PCGrad when the step holds
        several tasks), and at an update's last minibatch the gradients summed across ranks
        where DDP does not sum them. Returns each minibatch's task and task loss (on the
        device)."""
        surgery = self.config.pcgrad and len(refs) > 1
        losses, task_grads, touched = [], [], None
        for ref in refs:
            losses.append(self.loss_backward(ref))
            if surgery:  # one backward per task, each task's gradient taken apart
                flat, present = take_gradients(self.model)
                task_grads.append(self.distributed.sum_(flat))
                touched = present if touched is None else [
                    a or b for a, b in zip(touched, present, strict=True)]
        if surgery:  # project away the conflicts
            for ref, rate in zip(refs, conflict_rates(task_grads), strict=True):
                self.state.running[f"{ref.task}/pcgrad_conflicts"].append(rate)
            put_gradients(self.model, pcgrad(task_grads, self.surgery_rng), touched)
        elif self.ddp is None and (self.state.micro + 1) % self.accum == 0:
            # what DDP's backward hooks do (PCGrad summed each task's gradient above)
            self.distributed.sum_gradients(self.model)
        return losses

    def loss_backward(self, ref) -> tuple[str, torch.Tensor]:
        """One minibatch of one task: this rank's share, its loss, backward."""
        data, distributed = self.data[ref.task], self.distributed
        rows, share = rank_share(len(ref.indices), distributed.rank, distributed.world_size)
        # the rank's examples are padded as a batch of their own (a ranking example is a
        # group of rows, so a share of the padded rows would not be a share of examples)
        batch = {k: v.to(self.device)
                 for k, v in get_batch(data.train, ref.indices[rows], data.collator).items()}
        labels = batch.pop("labels")
        # Each rank's loss is weighted by its share of the batch, so that the gradients
        # summed over ranks are the whole batch's; DDP averages, hence × world size.
        weight = share / self.accum
        sync = contextlib.nullcontext()
        if self.ddp is not None:
            weight *= self.distributed.world_size
            if (self.state.micro + 1) % self.accum:  # accumulate locally, reduce at the last
                sync = self.ddp.no_sync()
        if self.config.freeze_encoder_steps:  # the encoder learns from this step on
            self.model.freeze_encoder(self.state.step < self.config.freeze_encoder_steps)
        with sync:
            with autocast_context(self.device, self.amp_dtype):
                result = batch_loss(self.ddp or self.model, self.tasks[ref.task], batch,
                                    labels, self.config.smart, self.adv_weights[ref.task],
                                    self.teacher, self.config.label_smoothing)
            loss_weight = self.config.tasks[ref.task].loss_weight
            self.updater.scaler.scale(result.loss * (weight * loss_weight)).backward()
        # Weighted by this rank's share: summed over ranks it is the global batch's loss.
        task_loss = result.task_loss.float() * share
        self.state.running[f"{ref.task}/loss"].append(task_loss)
        self.state.adv_skipped += result.adv_skipped  # a bool tensor stays a count
        for name, value in result.terms.items():
            self.state.running[f"{ref.task}/{name}"].append(value)
        self.clock.examples += len(ref.indices)
        return ref.task, task_loss

    # -- logging, evaluation, checkpoints ---------------------------------------------------

    def no_progress(self) -> bool:
        """Whether ``early_stopping_patience`` evaluations in a row brought no better
        ``best_metric`` (rank 0 decides; every rank stops)."""
        patience = self.config.early_stopping_patience
        if not patience:
            return False
        flag = torch.zeros(1, device=self.device)
        if self.main:
            scores = [entry["score"] for entry in self.state.evals]
            since_best = len(scores) - 1 - scores.index(max(scores))
            flag += since_best >= patience
        stop = bool(self.distributed.sum_(flag).item())
        if stop:
            log.info("early stop at step %d: %d evaluations without a better %s",
                     self.state.step, patience, self.config.best_metric)
        return stop

    def resume_state(self) -> dict[str, Any]:
        """What resuming needs besides the weights (``mtdnn.runs.checkpoint``)."""
        updater = self.updater
        return training_state(self.state, updater.optimizer, updater.scheduler, updater.scaler,
                              self.surgery_rng)

    @property
    def teacher_start_share(self) -> float | None:
        return None if self.teacher is None else self.teacher.start_share

    def cleanup(self) -> dict[str, Any]:
        """Close the logs; write and return the summary (rank 0)."""
        state = self.state
        if not self.main:
            return {"run_dir": str(self.run.path), "steps": state.step,
                    "rank": self.distributed.rank}
        self.trackers.close()
        best = max(state.evals, key=lambda e: e["score"])
        self.clock.count(self.state)
        seconds = state.train_seconds
        summary = {"run_dir": str(self.run.path), "steps": state.step,
                   "precision": self.config.precision, "best": best, "last": state.evals[-1],
                   "stopped_early": self.stopped_early,
                   "train_seconds": round(seconds, 3),
                   "train_examples_per_s": round(state.train_examples / max(seconds, 1e-9), 2),
                   "resumed_from_step": self.resumed_from_step,
                   # the process that finished the run: the last to start or resume it
                   "machine": state.trained_by[-1]["machine"],
                   "code_version": state.trained_by[-1]["code_version"],
                   "trained_by": state.trained_by}
        if self.teacher is not None:
            summary["teacher_start_share"] = self.teacher.start_share
        log.info("training: %.1f examples/s over %.0f s (evaluation and checkpoints "
                 "excluded%s)", summary["train_examples_per_s"], seconds,
                 f"; resumed at step {self.resumed_from_step}" if self.resumed_from_step else "")
        atomic_write_text(self.run.summary_file, json.dumps(summary, indent=2) + "\n")
        return summary
