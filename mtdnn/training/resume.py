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
from mtdnn.modeling.weights import ENCODER_DIR, HEADS_FILE, load_heads
from mtdnn.runs.checkpoint import (
    STATE_FILE,
    TEACHER_FILE,
    check_checkpoint,
    load_checkpoint_tasks,
    load_training_state,
    saved_run_config,
)
from mtdnn.runs.run_state import RunState
from mtdnn.tasks.task_def import TaskDef

if TYPE_CHECKING:
    import torch

    from mtdnn.config.train_config import TrainConfig


log = logging.getLogger(__name__)


@dataclass
class StartingPoint:
    """What a run starts from. ``weights``: the checkpoint whose encoder it loads, the one
    it resumes or ``init_checkpoint``; none for fresh heads on the configured encoder.
    ``heads``: the weights of the checkpoint's heads that the run's tasks take over (same
    type and labels), by task. A resumed run also continues ``saved``
    (``training_state.pt``: its optimizer, scheduler, scaler and RNG), its loop state
    ``run`` and its ``teacher``, and may be ``extended``: keys made longer, by name, as
    (saved, now)."""

    weights: Path | None = None
    heads: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    resumed: Path | None = None
    run: RunState | None = None
    saved: dict[str, Any] = field(default_factory=dict)
    teacher: dict[str, Any] | None = None
    extended: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def encoder_dir(self) -> Path | None:
        """The saved encoder the run loads, if it starts from a checkpoint."""
        return None if self.weights is None else self.weights / ENCODER_DIR


def start_checkpoint(config: TrainConfig, tasks: dict[str, TaskDef]) -> StartingPoint:
    """The starting point (:class:`StartingPoint`) of a run of ``tasks``, every file of it
    checked."""
    if config.resume is None:
        if config.init_checkpoint is None:
            return StartingPoint()
        source = Path(config.init_checkpoint)
        check_checkpoint(source)
        heads = heads_taken_over(source, tasks)
        log.info("initialised from %s: encoder, heads of %s", source,
                 ", ".join(heads) or "no task (all heads fresh)")
        return StartingPoint(weights=source, heads=heads)
    path = resume_checkpoint(config.resume)
    start = resumed_from(path, config)
    start.heads = heads_taken_over(path, tasks)
    if set(start.heads) != set(tasks):
        raise MtdnnError(f"the checkpoint has no head for "
                         f"{sorted(set(tasks) - set(start.heads))}",
                         file=path / HEADS_FILE, key="resume",
                         allowed="resume with the same tasks")
    assert start.run is not None  # resumed_from read the loop state
    log.info("resumed from %s at step %d (epoch %d)", path, start.run.step, start.run.epoch)
    return start


def heads_taken_over(path: Path, tasks: dict[str, TaskDef]) -> dict[str, dict[str, torch.Tensor]]:
    """The head weights of checkpoint ``path`` for each of ``tasks`` it has with the same
    type and labels; the other tasks' heads start fresh."""
    saved_tasks = load_checkpoint_tasks(path)
    matching = [name for name, task in tasks.items() if (saved := saved_tasks.get(name))
                is not None and (saved.type, saved.labels) == (task.type, task.labels)]
    heads = load_heads(path) if matching else {}
    return {name: heads.get(name, {}) for name in matching}


def resumed_from(path: Path, config: TrainConfig) -> StartingPoint:
    """Everything checkpoint ``path`` holds for the run that continues it, but the heads
    (:func:`heads_taken_over`). A run resumed with a larger max_steps, epochs or min_steps
    goes on under the longer run's learning-rate schedule from the step it reached."""
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
    extended = {key: (saved_config.get(key), getattr(config, key)) for key in EXTENDABLE
                if saved_config.get(key) != getattr(config, key)}
    return StartingPoint(weights=path, resumed=path, run=run, saved=saved,
                         teacher=teacher, extended=extended)


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
