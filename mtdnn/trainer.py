"""The training loop: multi-task stage and per-task fine-tuning are the same function.

``train(config)`` reads as the MT-DNN recipe: sample a task, then a batch of it, forward
through the shared encoder and that task's head, task loss, backward, clip, step, log;
evaluate every task on its dev set every epoch (and every ``eval_every_steps``), and keep
the ``last`` and ``best`` checkpoints. A run started with ``init_checkpoint`` takes the
encoder (and heads of matching tasks) from a saved run; nothing else of that run is used.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from mtdnn.checkpoint import (
    ENCODER_DIR,
    check_checkpoint,
    copy_checkpoint,
    init_heads_from,
    save_checkpoint,
)
from mtdnn.config import OptimizerConfig, TrainConfig, config_to_yaml
from mtdnn.data import Collator, TaskSplit, get_batch, load_split
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_write_text
from mtdnn.inference import autocast_context, evaluate_split
from mtdnn.model import MultiTaskModel, load_encoder
from mtdnn.sampling import build_sampler
from mtdnn.task_def import TaskDef, load_task_defs

log = logging.getLogger(__name__)


@dataclass
class TaskData:
    """A task's tokenized splits and its collator."""

    train: TaskSplit
    dev: TaskSplit | None
    collator: Collator


@dataclass
class RunState:
    """What changes as training goes: counters and the best dev score so far."""

    step: int = 0
    epoch: int = 0
    best_score: float = -math.inf
    evals: list[dict[str, Any]] = field(default_factory=list)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch; make CPU kernels deterministic."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def choose_device(config: TrainConfig) -> tuple[torch.device, torch.dtype | None]:
    """CUDA when present (bf16 where supported, else fp16); CPU in fp32 unless asked."""
    use_cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    if config.device == "cuda" and not torch.cuda.is_available():
        raise MtdnnError("CUDA was requested but is not available", key="device",
                         allowed="auto, cpu")
    device = torch.device("cuda" if use_cuda else "cpu")
    if config.precision == "auto":
        if not use_cuda:
            return device, None
        return device, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return device, {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[config.precision]


def select_tasks(config: TrainConfig) -> dict[str, TaskDef]:
    """The task definitions of the run's tasks, in config order."""
    known = load_task_defs(config.task_defs)
    unknown = [name for name in config.tasks if name not in known]
    if unknown:
        raise MtdnnError(f"unknown task '{unknown[0]}'", key="tasks",
                         allowed=f"tasks defined in {', '.join(config.task_defs)}: "
                                 f"{', '.join(known)}")
    return {name: known[name] for name in config.tasks}


def load_task_data(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer: Any
                   ) -> dict[str, TaskData]:
    """Tokenize (or load from cache) every task's train and dev files."""
    cache = Path(config.cache_dir) if config.cache_dir else Path(config.data_dir) / ".cache"
    data = {}
    for name, task in tasks.items():
        train_path, dev_path = config.task_files(name)
        train = load_split(train_path, task, tokenizer, config.max_seq_len, cache)
        dev = load_split(dev_path, task, tokenizer, config.max_seq_len, cache) if dev_path else None
        dtype = getattr(torch, task.task_type.target_dtype)
        data[name] = TaskData(train, dev, Collator(tokenizer.pad_token_id, dtype))
        for split in (train, dev):
            if split is not None:
                log.info("%s: %s, %d examples, %d truncated%s", name, split.path, len(split),
                         split.num_truncated, " (cached)" if split.from_cache else "")
    return data


def build_optimizer(model: torch.nn.Module, config: OptimizerConfig) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases and LayerNorm weights (all 1-D parameters)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr, betas=tuple(config.adam_betas), eps=config.adam_eps)


def score_of(metrics: dict[str, dict[str, float]], best_metric: str) -> float:
    """The model-selection score: ``mean`` of each task's first metric, or ``task/metric``."""
    if best_metric == "mean":
        return float(np.mean([next(iter(m.values())) for m in metrics.values()]))
    task, _, metric = best_metric.partition("/")
    return metrics[task][metric]


def check_best_metric(best_metric: str, tasks: dict[str, TaskDef], data: dict[str, TaskData]
                      ) -> None:
    with_dev = [t for t in tasks if data[t].dev is not None]
    allowed = ", ".join(["mean"] + [f"{t}/{m}" for t in with_dev for m in tasks[t].metrics])
    task, _, metric = best_metric.partition("/")
    if best_metric != "mean" and (task not in with_dev or metric not in tasks[task].metrics):
        raise MtdnnError(f"no dev metric '{best_metric}'", key="best_metric", allowed=allowed)


def start_run_dir(config: TrainConfig) -> Path:
    """Create the run folder and record the resolved config in it."""
    run_dir = Path(config.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", config_to_yaml(config))
    log.info("resolved config:\n%s", config_to_yaml(config))
    return run_dir


def train(config: TrainConfig) -> dict[str, Any]:
    """Run training as configured; returns the best and last dev metrics and paths."""
    run_dir = start_run_dir(config)
    seed_everything(config.seed)
    device, amp_dtype = choose_device(config)
    tasks = select_tasks(config)
    encoder_source = config.encoder
    if config.init_checkpoint:
        check_checkpoint(Path(config.init_checkpoint))
        encoder_source = str(Path(config.init_checkpoint) / ENCODER_DIR)
    encoder, tokenizer = load_encoder(encoder_source, config.encoder_layers)
    model = MultiTaskModel(encoder, tasks)
    if config.init_checkpoint:
        copied = init_heads_from(model, Path(config.init_checkpoint))
        log.info("initialised from %s: encoder, heads of %s", config.init_checkpoint,
                 ", ".join(copied) or "no task (all heads fresh)")
    model.to(device)
    data = load_task_data(config, tasks, tokenizer)
    check_best_metric(config.best_metric, tasks, data)

    sampler = build_sampler(config.sampler, {t: len(d.train) for t, d in data.items()},
                            config.batch_size, config.seed)
    accum = config.optimizer.grad_accum_steps
    total_steps = config.max_steps or math.ceil(sampler.num_batches * config.epochs / accum)
    optimizer = build_optimizer(model, config.optimizer)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(config.optimizer.warmup_ratio * total_steps), total_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    writer = SummaryWriter(str(run_dir / "tensorboard"))
    metrics_file = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")
    state = RunState()
    config_yaml = config_to_yaml(config)

    def record(entry: dict[str, Any]) -> None:
        metrics_file.write(json.dumps(entry) + "\n")
        metrics_file.flush()

    def evaluate_and_save() -> None:
        metrics = {t: evaluate_split(model, d.dev, d.collator, config.eval_batch_size, device,
                                     amp_dtype) for t, d in data.items() if d.dev is not None}
        for task, values in metrics.items():
            for name, value in values.items():
                writer.add_scalar(f"eval/{task}/{name}", value, state.step)
        score = score_of(metrics, config.best_metric) if metrics else -state.step
        is_best = score > state.best_score
        state.best_score = max(state.best_score, score)
        entry = {"kind": "eval", "step": state.step, "epoch": state.epoch, "metrics": metrics,
                 "score": score, "best": is_best}
        record(entry)
        state.evals.append(entry)
        log.info("step %d epoch %d dev %s%s", state.step, state.epoch, json.dumps(metrics),
                 " (best)" if is_best else "")
        info = {"step": state.step, "epoch": state.epoch, "metrics": metrics, "score": score}
        save_checkpoint(run_dir / "last", model, tokenizer, config_yaml, info)
        if is_best:
            copy_checkpoint(run_dir / "last", run_dir / "best")

    running: dict[str, list[float]] = defaultdict(list)
    smoothed: dict[str, float] = {}
    progress = tqdm(total=total_steps, disable=not config.progress_bar, desc="train")
    micro = 0
    model.train()
    while state.step < total_steps:
        for ref in sampler.plan_epoch():
            # One minibatch of one task: forward, task loss, backward.
            task = data[ref.task]
            batch = {k: v.to(device) for k, v in get_batch(task.train, ref.indices,
                                                            task.collator).items()}
            labels = batch.pop("labels")
            with autocast_context(device, amp_dtype):
                outputs = model(ref.task, **batch)
            loss = tasks[ref.task].task_type.loss(outputs, labels)
            if not torch.isfinite(loss):
                raise MtdnnError(f"the loss of task '{ref.task}' is {loss.item()} at step "
                                 f"{state.step}; the last good checkpoint is {run_dir / 'last'}",
                                 allowed="a lower optimizer.lr, or precision=fp32")
            scaler.scale(loss / accum).backward()
            running[ref.task].append(loss.item())
            smoothed[ref.task] = 0.9 * smoothed.get(ref.task, loss.item()) + 0.1 * loss.item()
            micro += 1
            if micro % accum:
                continue
            # Optimizer step: clip, step, schedule, log.
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                       config.optimizer.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            state.step += 1
            progress.update(1)
            progress.set_postfix({t: f"{v:.3f}" for t, v in smoothed.items()}, refresh=False)
            if state.step % config.log_every_steps == 0 or state.step == total_steps:
                lr = scheduler.get_last_lr()[0]
                writer.add_scalar("train/lr", lr, state.step)
                writer.add_scalar("train/grad_norm", float(grad_norm), state.step)
                for name, losses in running.items():
                    writer.add_scalar(f"train/{name}/loss", float(np.mean(losses)), state.step)
                    record({"kind": "train", "step": state.step, "epoch": state.epoch,
                            "task": name, "loss": float(np.mean(losses)), "lr": lr})
                running.clear()
            if config.eval_every_steps and state.step % config.eval_every_steps == 0:
                evaluate_and_save()
            if state.step >= total_steps:
                break
        else:  # a complete epoch
            state.epoch += 1
            evaluate_and_save()
    if not state.evals or state.evals[-1]["step"] != state.step:
        evaluate_and_save()
    progress.close()
    writer.close()
    metrics_file.close()
    best = max(state.evals, key=lambda e: e["score"])
    summary = {"run_dir": str(run_dir), "steps": state.step, "best": best,
               "last": state.evals[-1]}
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary
