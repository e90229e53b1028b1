"""Rebuilding a training run from a checkpoint: the model to train (fresh heads, a stage's
encoder and heads, or everything of the run being resumed), and its loop, optimizer,
scheduler, scaler, teacher and RNG as they were, so that a killed run continues exactly."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from mtdnn.errors import MtdnnError
from mtdnn.modeling.smart import MeanTeacher
from mtdnn.runs.checkpoint import (
    ENCODER_DIR,
    HEADS_FILE,
    STATE_FILE,
    TEACHER_FILE,
    check_checkpoint,
    init_heads_from,
    load_training_state,
    saved_run_config,
)
from mtdnn.runs.randomness import set_rng_state
from mtdnn.runs.run_state import RunState
from mtdnn.tasks.task_def import TaskDef

if TYPE_CHECKING:  # mtdnn.modeling.model imports transformers (seconds); reading records needs none
    from mtdnn.config.train_config import TrainConfig
    from mtdnn.modeling.model import MultiTaskModel


log = logging.getLogger(__name__)

def restore_training_state(path: Path, optimizer: torch.optim.Optimizer, scheduler: Any,
                           scaler: torch.amp.GradScaler, teacher: MeanTeacher | None
                           ) -> RunState:
    """Load ``training_state.pt`` (and the teacher) of checkpoint ``path`` into the run."""
    saved = load_training_state(path / STATE_FILE)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    scaler.load_state_dict(saved["scaler"])
    if teacher is not None:
        if not (path / TEACHER_FILE).is_file():
            raise MtdnnError("the checkpoint has no SMART teacher, but this run keeps one",
                             file=path, key="resume", allowed="resume with the same smart.*")
        with safe_open(path / TEACHER_FILE, "pt") as handle:
            updates = int(handle.metadata()["updates"])
        teacher.load_state_dict({"model": load_file(path / TEACHER_FILE), "updates": updates})
    set_rng_state(saved["rng"])
    run = saved["run"]
    return RunState(**{**run, "running": defaultdict(list, run["running"])})


def resume_training(path: Path, config: TrainConfig, total_steps: int,
                    optimizer: torch.optim.Optimizer, scheduler: Any,
                    scaler: torch.amp.GradScaler, teacher: MeanTeacher | None) -> RunState:
    """Continue the run saved in checkpoint ``path``: its loop state, optimizer, scheduler,
    scaler, teacher and RNG. A run resumed with a larger max_steps, epochs or min_steps
    goes on under the longer run's learning-rate schedule from the step it reached."""
    from mtdnn.config.resuming import EXTENDABLE
    from mtdnn.training.optimization import follow_new_schedule  # (transformers: only for training)

    saved = saved_run_config(path)
    grown = {key: (saved.get(key), getattr(config, key)) for key in EXTENDABLE
             if saved.get(key) != getattr(config, key)}
    state = restore_training_state(path, optimizer, scheduler, scaler, teacher)
    log.info("resumed from %s at step %d (epoch %d)", path, state.step, state.epoch)
    if grown:
        log.info("extending the run (%s) to %d steps: from step %d the learning rate follows "
                 "the %d-step schedule (now %.3g)", ", ".join(
                     f"{key} {old} → {new}" for key, (old, new) in grown.items()),
                 total_steps, state.step + 1, total_steps,
                 follow_new_schedule(optimizer, scheduler))
    return state


def resume_checkpoint(resume: str | None) -> Path | None:
    """The checkpoint to resume from: ``resume`` itself, or ``<resume>/last`` for a run."""
    if resume is None:
        return None
    path = Path(resume)
    if (path / "last").is_dir():
        path = path / "last"
    check_checkpoint(path)
    if not (path / STATE_FILE).is_file():
        raise MtdnnError(f"the checkpoint has no {STATE_FILE} to resume from", file=path,
                         key="resume", allowed="a run folder or its 'last' checkpoint")
    return path


def continue_keys(run_dir: Path) -> dict[str, Any]:
    """Config keys that carry on in ``run_dir``: resume an interrupted run from its last
    checkpoint, replace one that never wrote a checkpoint, start fresh in a new folder."""
    if (run_dir / "last" / STATE_FILE).is_file():
        return {"resume": str(run_dir)}
    return {"overwrite": True} if run_dir.exists() else {}


def build_model(config: TrainConfig, tasks: dict[str, TaskDef], resume_from: Path | None
                ) -> tuple[MultiTaskModel, Any]:
    """Fresh heads on the configured encoder; or the shared encoder (and matching heads) of
    ``init_checkpoint``; or everything of the checkpoint being resumed."""
    from mtdnn.modeling.model import MultiTaskModel, load_encoder

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
