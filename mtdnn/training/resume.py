"""Where a training run starts: the checkpoint its weights come from, and, for a run that is
resumed, everything else it continues with (loop state, optimizer, scheduler, scaler,
teacher, RNG), read and checked before anything is built or written. Each part goes to the
builder that owns it, so that a killed run continues exactly."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import safe_open

from mtdnn.errors import MtdnnError
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
from mtdnn.runs.run_state import RunState
from mtdnn.tasks.task_def import TaskDef

if TYPE_CHECKING:  # mtdnn.modeling.model imports transformers (seconds); reading records needs none
    from mtdnn.config.train_config import TrainConfig
    from mtdnn.modeling.model import MultiTaskModel


log = logging.getLogger(__name__)


@dataclass
class StartingPoint:
    """What a run starts from. ``weights``: the checkpoint whose encoder (and matching heads)
    it loads, the one it resumes or ``init_checkpoint``; none for fresh heads on the
    configured encoder. A resumed run also continues ``saved`` (``training_state.pt``: its
    optimizer, scheduler, scaler and RNG), its loop state ``run`` and its ``teacher``, and
    may be ``extended``: keys made longer, by name, as (saved, now)."""

    weights: Path | None = None
    resumed: Path | None = None
    run: RunState | None = None
    saved: dict[str, Any] = field(default_factory=dict)
    teacher: dict[str, Any] | None = None
    extended: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def start_checkpoint(config: TrainConfig) -> StartingPoint:
    """The run's starting point (:class:`StartingPoint`), every file of it checked."""
    if config.resume is None:
        if config.init_checkpoint is None:
            return StartingPoint()
        check_checkpoint(Path(config.init_checkpoint))
        return StartingPoint(weights=Path(config.init_checkpoint))
    path = resume_checkpoint(config.resume)
    return resumed_from(path, config)


def resumed_from(path: Path, config: TrainConfig) -> StartingPoint:
    """Everything checkpoint ``path`` holds for the run that continues it. A run resumed
    with a larger max_steps, epochs or min_steps goes on under the longer run's
    learning-rate schedule from the step it reached."""
    from mtdnn.config.resuming import EXTENDABLE

    saved_config = saved_run_config(path)
    saved = load_training_state(path / STATE_FILE)
    teacher = None
    if config.smart.keeps_teacher and (path / TEACHER_FILE).is_file():
        with safe_open(path / TEACHER_FILE, "pt") as handle:  # weights and count, one read
            teacher = {"model": {key: handle.get_tensor(key) for key in handle.keys()},
                       "updates": int(handle.metadata()["updates"])}
    run = saved["run"]
    run = RunState(**{**run, "running": defaultdict(list, run["running"])})
    log.info("resumed from %s at step %d (epoch %d)", path, run.step, run.epoch)
    extended = {key: (saved_config.get(key), getattr(config, key)) for key in EXTENDABLE
                if saved_config.get(key) != getattr(config, key)}
    return StartingPoint(weights=path, resumed=path, run=run, saved=saved, teacher=teacher,
                         extended=extended)


def resume_checkpoint(resume: str) -> Path:
    """The checkpoint to resume from: ``resume`` itself, or ``<resume>/last`` for a run."""
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


def build_model(config: TrainConfig, tasks: dict[str, TaskDef], start: StartingPoint
                ) -> tuple[MultiTaskModel, Any]:
    """Fresh heads on the configured encoder; or the shared encoder (and matching heads) of
    ``init_checkpoint``; or everything of the checkpoint being resumed."""
    from mtdnn.modeling.model import MultiTaskModel, load_encoder

    source = start.weights
    if source is None:
        encoder, tokenizer = load_encoder(config.encoder, config.encoder_layers,
                                          config.encoder_dropout)
        return MultiTaskModel(encoder, tasks), tokenizer
    encoder, tokenizer = load_encoder(str(source / ENCODER_DIR), dropout=config.encoder_dropout)
    model = MultiTaskModel(encoder, tasks)
    copied = init_heads_from(model, source)
    if start.resumed is None:
        log.info("initialised from %s: encoder, heads of %s", source,
                 ", ".join(copied) or "no task (all heads fresh)")
    elif set(copied) != set(tasks):
        raise MtdnnError(f"the checkpoint has no head for {sorted(set(tasks) - set(copied))}",
                         file=source / HEADS_FILE, key="resume",
                         allowed="resume with the same tasks")
    return model, tokenizer
