"""The training loop: multi-task stage and per-task fine-tuning are the same function.

``train(config)`` reads as the MT-DNN recipe: sample a task, then a batch of it, forward
through the shared encoder and that task's head, task loss, backward, clip, step, log;
evaluate every task on its dev set every epoch (and every ``eval_every_steps``), and keep
the ``last`` and ``best`` checkpoints. A run started with ``init_checkpoint`` takes the
encoder (and heads of matching tasks) from a saved run; nothing else of that run is used.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from mtdnn.checkpoint import copy_checkpoint, keep_recent, save_checkpoint
from mtdnn.components import (
    build_model,
    check_best_metric,
    check_lengths,
    check_run_dir,
    choose_device,
    load_task_data,
    score_of,
    seed_everything,
    select_tasks,
    smart_adv_weights,
    start_run_dir,
    use_cuda,
)
from mtdnn.config import TrainConfig, config_to_yaml
from mtdnn.data import get_batch
from mtdnn.distributed import Distributed, init_distributed, shutdown
from mtdnn.errors import Interrupted, MtdnnError
from mtdnn.files import atomic_write_text
from mtdnn.gradient_surgery import conflict_rates, pcgrad, put_gradients, take_gradients
from mtdnn.inference import evaluate_split
from mtdnn.model import MultiTaskModel
from mtdnn.objective import batch_loss
from mtdnn.optimization import build_optimizer, build_scheduler
from mtdnn.precision import AMP_DTYPES, autocast_context
from mtdnn.run_state import (
    RunState,
    restore_sampler,
    restore_training_state,
    resume_checkpoint,
    sampler_state,
    training_state,
    truncate_metrics,
)
from mtdnn.sampling import BatchRef, build_sampler
from mtdnn.smart import MeanTeacher

log = logging.getLogger(__name__)


def set_encoder_frozen(model: MultiTaskModel, frozen: bool) -> None:
    """Freeze the shared encoder (for the first ``freeze_encoder_steps`` updates)."""
    for param in model.encoder.parameters():
        param.requires_grad_(not frozen)


def due(every: int | None, step: int) -> bool:
    """Whether a periodic action (evaluate, save) set to every ``every`` steps falls now."""
    return bool(every) and step % every == 0


def log_training(state: RunState, writer: SummaryWriter, record, lr: float,
                 grad_norm: torch.Tensor) -> None:
    """Write the losses gathered since the last log line to tensorboard and metrics.jsonl."""
    writer.add_scalar("train/lr", lr, state.step)
    writer.add_scalar("train/grad_norm", float(grad_norm), state.step)
    writer.add_scalar("train/adv_skipped", state.adv_skipped, state.step)
    writer.add_scalar("train/nonfinite_skipped", state.nonfinite_skipped, state.step)
    by_task: dict[str, dict[str, float]] = defaultdict(dict)
    for key, values in state.running.items():
        writer.add_scalar(f"train/{key}", float(np.mean(values)), state.step)
        task, name = key.split("/")
        by_task[task][name] = float(np.mean(values))
    for task in sorted(by_task):
        record({"kind": "train", "step": state.step, "epoch": state.epoch, "task": task,
                "lr": lr, "adv_skipped": state.adv_skipped, **by_task[task]})
    state.running.clear()


def train(config: TrainConfig) -> dict[str, Any]:
    """Run training as configured; returns the best and last dev metrics and paths."""
    distributed = init_distributed("cuda" if use_cuda(config) else "cpu")
    try:
        return _train(config, distributed)
    except KeyboardInterrupt:
        raise interrupted(Path(config.output_dir)) from None
    finally:
        shutdown(distributed)


def interrupted(run_dir: Path) -> Interrupted:
    """Ctrl-C: what the run's ``last`` checkpoint holds (saved whole or not at all) and
    how to continue from it."""
    info = run_dir / "last" / "checkpoint.json"
    if not info.is_file():
        return Interrupted("interrupted before the first checkpoint; nothing to resume",
                           file=run_dir, allowed="start the run again (overwrite=true)")
    step = json.loads(info.read_text(encoding="utf-8"))["step"]
    return Interrupted(f"interrupted; the last checkpoint holds step {step}: resume with "
                       f"resume={run_dir}", file=run_dir)


def _train(config: TrainConfig, distributed: Distributed) -> dict[str, Any]:
    main = distributed.is_main
    resume_from = resume_checkpoint(config.resume)
    # Everything is checked before the run folder is written: a failed start leaves no
    # folder that looks like a run (and an old run is replaced only once all is well).
    device, precision = choose_device(config, distributed.local_rank)
    # The resolved precision is what config.yaml records (and what a resume must match).
    config = dataclasses.replace(config, precision=precision)
    amp_dtype = AMP_DTYPES[precision]
    log.info("device %s, precision %s", device, precision)
    check_run_dir(config, resume_from)
    seed_everything(config.seed)
    tasks = select_tasks(config)
    model, tokenizer = build_model(config, tasks, resume_from)
    check_lengths(config, tasks, model.encoder, tokenizer)
    model.to(device)
    distributed.broadcast_parameters(model)
    torch.manual_seed(config.seed + distributed.rank)  # each rank its own dropout masks
    data = load_task_data(config, tasks, tokenizer, distributed)
    check_best_metric(config.best_metric, tasks, data)
    run_dir = start_run_dir(config, resume_from) if main else Path(config.output_dir)

    lengths = {t: np.array([len(ids) for ids in d.train.dataset["input_ids"]])
               for t, d in data.items()} if config.sampler.group_by_length else None
    sampler = build_sampler(config.sampler, {t: len(d.train) for t, d in data.items()},
                            config.batch_size, config.seed, config.epochs, lengths)
    accum = config.optimizer.grad_accum_steps
    total_steps = config.max_steps or max(
        config.min_steps or 0, math.ceil(sampler.num_steps * config.epochs / accum))
    optimizer = build_optimizer(model, config.optimizer)
    scheduler = build_scheduler(optimizer, config.optimizer, total_steps)
    surgery_rng = np.random.default_rng(config.seed)  # PCGrad's projection order
    if config.pcgrad and accum > 1:
        raise MtdnnError("pcgrad projects each step's task gradients; it cannot be combined "
                         "with gradient accumulation", key="pcgrad",
                         allowed="pcgrad=false, or optimizer.grad_accum_steps=1")
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    smart = config.smart
    adv_weights = smart_adv_weights(config, tasks)
    teacher = None
    if smart.enabled and smart.bregman_weight > 0:
        teacher = MeanTeacher(model, total_steps // smart.teacher_update_every,
                              smart.teacher_beta_early, smart.teacher_beta_late,
                              smart.teacher_early_fraction,
                              dropout=smart.teacher_dropout == "shared")
    state = RunState(sampler_state=sampler_state(sampler))
    if resume_from is not None:
        state = restore_training_state(resume_from, optimizer, scheduler, scaler, teacher)
        if main:
            truncate_metrics(run_dir / "metrics.jsonl", state.step)
        log.info("resumed from %s at step %d (epoch %d)", resume_from, state.step, state.epoch)

    writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=state.step + 1) \
        if main else None
    metrics_file = open(run_dir / "metrics.jsonl", "a", encoding="utf-8") if main else None
    config_yaml = config_to_yaml(config)

    def record(entry: dict[str, Any]) -> None:
        metrics_file.write(json.dumps(entry) + "\n")
        metrics_file.flush()

    # Training throughput of this process, evaluation and checkpointing excluded.
    clock = {"started": time.perf_counter(), "outside_training": 0.0, "examples": 0}

    def evaluate_and_save(evaluate: bool = True) -> None:
        started = time.perf_counter()
        try:
            _evaluate_and_save(evaluate)
        finally:
            clock["outside_training"] += time.perf_counter() - started

    def _evaluate_and_save(evaluate: bool) -> None:
        if not main:  # rank 0 evaluates and writes; the others wait
            distributed.barrier()
            return
        # Without evaluation (an epoch's end with eval_every_epoch off) `last` is still saved,
        # so the run stays resumable.
        info: dict[str, Any] = {"step": state.step, "epoch": state.epoch, "metrics": None}
        is_best = False
        if evaluate:
            metrics = {t: evaluate_split(model, d.dev, d.collator, config.eval_batch_size,
                                         device, amp_dtype)
                       for t, d in data.items() if d.dev is not None}
            for task, values in metrics.items():
                for name, value in values.items():
                    writer.add_scalar(f"eval/{task}/{name}", value, state.step)
            score = score_of(metrics, config.best_metric) if metrics else -state.step
            is_best = score > state.best_score
            state.best_score = max(state.best_score, score)
            entry = {"kind": "eval", "step": state.step, "epoch": state.epoch,
                     "metrics": metrics, "score": score, "best": is_best}
            record(entry)
            state.evals.append(entry)
            log.info("step %d epoch %d dev %s%s", state.step, state.epoch, json.dumps(metrics),
                     " (best)" if is_best else "")
            info.update(metrics=metrics, score=score)
        save_checkpoint(run_dir / "last", model, tokenizer, config_yaml, info, teacher=teacher,
                        training_state=training_state(state, optimizer, scheduler, scaler))
        if is_best:
            copy_checkpoint(run_dir / "last", run_dir / "best")
        if evaluate and config.keep_last_n:
            keep_recent(run_dir, state.step, config.keep_last_n)
        distributed.barrier()

    def forward_backward(ref: BatchRef) -> None:
        """One minibatch of one task: forward, task loss + λ_s R_s + μ D_Breg, backward."""
        task = data[ref.task]
        rows, share = distributed.shard(len(ref.indices))  # this rank's share of the batch
        batch = {k: v[rows].to(device) for k, v in get_batch(task.train, ref.indices,
                                                              task.collator).items()}
        labels = batch.pop("labels")
        with autocast_context(device, amp_dtype):
            step = batch_loss(model, tasks[ref.task], batch, labels, smart,
                              adv_weights[ref.task], teacher)
        # The loss of the whole global batch (all ranks agree on it, NaN included).
        global_loss = distributed.sum_(step.task_loss.float() * share).item()
        if not math.isfinite(global_loss):
            last = run_dir / "last"
            kept = (f"the last good checkpoint is {last}" if last.is_dir()
                    else "no checkpoint was written yet")
            raise MtdnnError(
                f"the loss of task '{ref.task}' is {global_loss} at step "
                f"{state.step}; {kept}", allowed="a lower optimizer.lr, or precision=fp32")
        state.adv_skipped += step.adv_skipped
        for name, value in step.terms.items():
            state.running[f"{ref.task}/{name}"].append(float(value))
        loss = step.loss
        scaler.scale(loss * share / accum).backward()
        state.running[f"{ref.task}/loss"].append(global_loss)
        clock["examples"] += len(ref.indices)

    if config.compile:
        # After the teacher's copy: the compiled forward belongs to the student alone.
        model.encoder.compile(dynamic=True)
    progress = tqdm(total=total_steps, initial=state.step,
                    disable=not (config.progress_bar and main), desc="train")
    model.train()
    while state.step < total_steps:
        restore_sampler(sampler, state.sampler_state)
        plan = sampler.plan_epoch()
        for step_refs in plan[state.position:]:
            if state.step >= total_steps:
                break
            state.position += 1
            if config.freeze_encoder_steps:
                set_encoder_frozen(model, state.step < config.freeze_encoder_steps)
            if config.pcgrad and len(step_refs) > 1:
                # Gradient surgery: one backward per task, then project away conflicts.
                task_grads, touched = [], None
                for ref in step_refs:
                    forward_backward(ref)
                    flat, present = take_gradients(model)
                    task_grads.append(distributed.sum_(flat))
                    touched = present if touched is None else [
                        a or b for a, b in zip(touched, present, strict=True)]
                for ref, rate in zip(step_refs, conflict_rates(task_grads), strict=True):
                    state.running[f"{ref.task}/pcgrad_conflicts"].append(rate)
                put_gradients(model, pcgrad(task_grads, surgery_rng), touched)
            else:
                for ref in step_refs:
                    forward_backward(ref)
            state.micro += 1
            if state.micro % accum:
                continue
            # Optimizer step: reduce across ranks, clip, step, schedule, teacher update, log.
            if not (config.pcgrad and len(step_refs) > 1):  # PCGrad reduced per task already
                distributed.sum_gradients(model)
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                       config.optimizer.max_grad_norm)
            if not torch.isfinite(grad_norm) and not scaler.is_enabled():
                # Never step on a NaN: drop this update (fp16's GradScaler does the same).
                optimizer.zero_grad(set_to_none=True)
                state.nonfinite_skipped += 1
                continue
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            state.step += 1
            if teacher is not None and state.step % smart.teacher_update_every == 0:
                teacher.update(model)
            progress.update(1)
            progress.set_postfix(state.smoothed_losses(), refresh=False)
            if main and (state.step % config.log_every_steps == 0 or state.step == total_steps):
                log_training(state, writer, record, scheduler.get_last_lr()[0], grad_norm)
            if state.position == len(plan):
                continue  # the epoch's end, just below, evaluates and saves this step once
            if due(config.eval_every_steps, state.step):
                evaluate_and_save()
            elif due(config.save_every_steps, state.step):
                evaluate_and_save(evaluate=False)
        else:  # a complete epoch
            state.epoch, state.position = state.epoch + 1, 0
            state.sampler_state = sampler_state(sampler)
            evaluate_and_save(config.eval_every_epoch or state.step >= total_steps
                              or due(config.eval_every_steps, state.step))
    if not state.evals or state.evals[-1]["step"] != state.step:
        evaluate_and_save()
    progress.close()
    if not main:
        return {"run_dir": str(run_dir), "steps": state.step, "rank": distributed.rank}
    writer.close()
    metrics_file.close()
    best = max(state.evals, key=lambda e: e["score"])
    train_seconds = time.perf_counter() - clock["started"] - clock["outside_training"]
    summary = {"run_dir": str(run_dir), "steps": state.step, "precision": precision,
               "best": best,
               "last": state.evals[-1], "train_seconds": round(train_seconds, 3),
               "train_examples_per_s": round(clock["examples"] / max(train_seconds, 1e-9), 2)}
    log.info("training: %.1f examples/s over %.0f s (evaluation and checkpoints excluded)",
             summary["train_examples_per_s"], train_seconds)
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary
