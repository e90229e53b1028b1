"""What a training run is built from: device, seeds, tasks, data, model and run folder.

``mtdnn.trainer.train`` calls these in order before its loop; each is small enough to read
and to test on its own.
"""

from __future__ import annotations

import logging
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mtdnn.checkpoint import (
    ENCODER_DIR,
    HEADS_FILE,
    check_checkpoint,
    check_same_config,
    init_heads_from,
)
from mtdnn.config import TrainConfig, config_to_yaml
from mtdnn.data import Collator, TaskSplit, load_split
from mtdnn.distributed import ONE_PROCESS, Distributed
from mtdnn.errors import MtdnnError, did_you_mean
from mtdnn.files import atomic_write_text, check_output_folder, read_text, write_error
from mtdnn.model import MultiTaskModel, load_encoder
from mtdnn.precision import resolve_precision
from mtdnn.run_dir import RUN_FILES, RunDir
from mtdnn.schema import to_dict
from mtdnn.sources import canonical_path
from mtdnn.task_def import TaskDef, load_task_defs, task_from_mapping

log = logging.getLogger(__name__)


@dataclass
class TaskSplits:
    """A task's tokenized splits and its collator."""

    train: TaskSplit
    dev: TaskSplit | None
    collator: Collator


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch; make CPU kernels deterministic."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def use_cuda(config: TrainConfig) -> bool:
    if config.device == "cuda" and not torch.cuda.is_available():
        raise MtdnnError("CUDA was requested but is not available", key="device",
                         allowed="auto, cpu")
    return config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())


def choose_device(config: TrainConfig, local_rank: int = 0) -> tuple[torch.device, str]:
    """The run's device (CUDA when present) and its resolved precision (``auto``: the
    device's native bf16/fp16, fp32 on CPUs without bf16 or where SMART's ε needs it)."""
    cuda = use_cuda(config)
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    return device, resolve_precision(config.precision, device, config.smart)


def select_tasks(config: TrainConfig) -> dict[str, TaskDef]:
    """The task definitions of the run's tasks, in config order: from the task definition
    files, or written inline (``tasks.<name>.definition``)."""
    known = load_task_defs(config.task_defs)
    for name, spec in config.tasks.items():
        if spec.definition is None:
            continue
        if name in known:
            raise MtdnnError(f"task '{name}' is already defined in the task definitions",
                             key=f"tasks.{name}.definition",
                             allowed="a new task name for an inline definition")
        known[name] = task_from_mapping(name, spec.definition, None,
                                        prefix=f"tasks.{name}.definition")
    unknown = [name for name in config.tasks if name not in known]
    if unknown:
        raise MtdnnError(f"unknown task '{unknown[0]}'{did_you_mean(unknown[0], list(known))}",
                         key="tasks",
                         allowed=f"tasks defined in {', '.join(config.task_defs)}: "
                                 f"{', '.join(known)}")
    return {name: known[name] for name in config.tasks}


def load_task_data(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer: Any,
                   distributed: Distributed = ONE_PROCESS) -> dict[str, TaskSplits]:
    """Tokenize (or load from cache) every task's train and dev files. Under torchrun rank 0
    fills the cache first and the other ranks read it."""
    if not distributed.is_main:
        distributed.barrier()
    data = _load_task_data(config, tasks, tokenizer)
    if distributed.is_main:
        distributed.barrier()
    return data


def _load_task_data(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer: Any
                    ) -> dict[str, TaskSplits]:
    cache = config.cache_path()
    log.info("data cache: %s", cache)
    data = {}
    for name, task in tasks.items():
        columns = config.tasks[name].columns
        train_source, dev_source = config.task_files(name)
        train_path = canonical_path(train_source, task, columns, cache, require_labels=True)
        dev_path = dev_source and canonical_path(dev_source, task, columns, cache,
                                                 require_labels=True)
        train = load_split(train_path, task, tokenizer, config.max_seq_len, cache)
        dev = load_split(dev_path, task, tokenizer, config.max_seq_len, cache) if dev_path else None
        dtype = getattr(torch, task.task_type.target_dtype)
        data[name] = TaskSplits(train, dev, Collator(tokenizer.pad_token_id, dtype))
        for split in (train, dev):
            if split is not None:
                log.info("%s: %s, %d examples, %d truncated%s", name, split.path, len(split),
                         split.num_truncated, " (cached)" if split.from_cache else "")
    return data


def smart_adv_weights(config: TrainConfig, tasks: dict[str, TaskDef]) -> dict[str, float]:
    """λ_s per task: the task's override, else the run's; 0 everywhere when SMART is off."""
    if not config.smart.enabled:
        return {name: 0.0 for name in tasks}
    return {name: config.smart.adv_weight if task.smart.adv_weight is None
            else task.smart.adv_weight for name, task in tasks.items()}


def score_of(metrics: dict[str, dict[str, float]], best_metric: str) -> float:
    """The model-selection score: ``mean`` of each task's first metric, or ``task/metric``."""
    if best_metric == "mean":
        return float(np.mean([next(iter(m.values())) for m in metrics.values()]))
    task, _, metric = best_metric.partition("/")
    return metrics[task][metric]


def check_best_metric(best_metric: str, tasks: dict[str, TaskDef], data: dict[str, TaskSplits]
                      ) -> None:
    with_dev = [t for t in tasks if data[t].dev is not None]
    allowed = ", ".join(["mean"] + [f"{t}/{m}" for t in with_dev for m in tasks[t].metrics])
    task, _, metric = best_metric.partition("/")
    if best_metric != "mean" and (task not in with_dev or metric not in tasks[task].metrics):
        raise MtdnnError(f"no dev metric '{best_metric}'", key="best_metric", allowed=allowed)


def check_run_dir(config: TrainConfig, resume_from: Path | None) -> Path:
    """Check, writing nothing, that the run folder can take this run.

    A folder that already holds a run is continued only with ``resume`` and replaced only
    with ``overwrite=true``; otherwise it is an error, so no result is lost by accident.
    ``overwrite`` never deletes the checkpoint the run starts from.
    """
    run_dir = Path(config.output_dir)
    check_output_folder(run_dir, "output_dir", allowed="a folder path (new or holding a run)")
    if resume_from is not None:
        check_same_config(read_text(RunDir(resume_from).config), to_dict(config),
                          resume_from)
    elif RunDir(run_dir).holds_run():
        if not config.overwrite:
            raise MtdnnError("the output folder already holds a run", file=run_dir,
                             key="output_dir", allowed="another output_dir, resume=<run> to "
                             "continue it, or overwrite=true to replace it")
        init = config.init_checkpoint
        if init and Path(init).resolve().is_relative_to(run_dir.resolve()):
            raise MtdnnError("overwrite=true would delete init_checkpoint, which is inside "
                             "the output folder", file=init, key="init_checkpoint",
                             allowed="an output_dir that does not hold the start checkpoint")
    return run_dir


def start_run_dir(config: TrainConfig, resume_from: Path | None) -> Path:
    """Create the run folder (replacing an old run only under ``overwrite``) and record the
    resolved config in it. Called once everything the run needs has been checked."""
    run_dir = check_run_dir(config, resume_from)
    if resume_from is None and config.overwrite:
        for name in RUN_FILES:
            path = run_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_error(run_dir, error) from None
    for leftover in run_dir.glob(".*.tmp"):  # a save that a kill interrupted
        shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink()
    atomic_write_text(RunDir(run_dir).config, config_to_yaml(config))
    return run_dir


def check_lengths(config: TrainConfig, tasks: dict[str, TaskDef], encoder: Any,
                  tokenizer: Any) -> None:
    """``max_seq_len`` must fit the encoder's position embeddings and leave the tokenizer
    room to truncate to (special tokens plus a token per text); otherwise transformers
    fails mid-run or silently truncates nothing."""
    positions = getattr(encoder.config, "max_position_embeddings", None)
    if positions and encoder.config.model_type in OFFSET_POSITION_MODELS:
        positions -= 2  # RoBERTa-style position ids start after the padding index
    if positions and config.max_seq_len > positions:
        raise MtdnnError(f"max_seq_len {config.max_seq_len} is longer than the encoder's "
                         f"{positions} position embeddings", key="max_seq_len",
                         allowed=f"1 to {positions} for {config.encoder}")
    for task in tasks.values():
        pair = len(task.inputs) == 2
        shortest = tokenizer.num_special_tokens_to_add(pair=pair) + len(task.inputs)
        if config.max_seq_len < shortest:
            raise MtdnnError(f"max_seq_len {config.max_seq_len} leaves no room for task "
                             f"'{task.name}''s text after the tokenizer's special tokens",
                             key="max_seq_len", allowed=f"at least {shortest}")


OFFSET_POSITION_MODELS = ("roberta", "xlm-roberta", "camembert", "longformer", "bart")


def build_model(config: TrainConfig, tasks: dict[str, TaskDef], resume_from: Path | None
                ) -> tuple[MultiTaskModel, Any]:
    """Fresh heads on the configured encoder; or the shared encoder (and matching heads) of
    ``init_checkpoint``; or everything of the checkpoint being resumed."""
    source = resume_from or (Path(config.init_checkpoint) if config.init_checkpoint else None)
    if source is None:
        encoder, tokenizer = load_encoder(config.encoder, config.encoder_layers,
                                          config.encoder_dropout)
        return MultiTaskModel(encoder, tasks), tokenizer
    check_checkpoint(source)
    encoder, tokenizer = load_encoder(str(source / ENCODER_DIR), dropout=config.encoder_dropout)
    model = MultiTaskModel(encoder, tasks)
    copied = init_heads_from(model, source)
    if resume_from is None:
        log.info("initialised from %s: encoder, heads of %s", source,
                 ", ".join(copied) or "no task (all heads fresh)")
    elif set(copied) != set(tasks):
        raise MtdnnError(f"the checkpoint has no head for {sorted(set(tasks) - set(copied))}",
                         file=source / HEADS_FILE, key="resume",
                         allowed="resume with the same tasks")
    return model, tokenizer


