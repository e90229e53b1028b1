"""Checkpoints, and everything exact resume needs: this module owns both.

A checkpoint is one folder, written atomically (temporary folder, then rename)::

    encoder/              save_pretrained safetensors + tokenizer: loads in plain transformers
    heads.safetensors     one tensor per head parameter, keyed "<task>.<param>"
    task_defs.yaml        the task definitions the heads were built from
    config.yaml           the resolved run config that wrote it
    checkpoint.json       step, epoch, dev metrics, package version
    teacher.safetensors   with SMART's Bregman term: the mean teacher (encoder + heads)
    training_state.pt     in ``last``: what resuming needs (optimizer, scheduler, scaler,
                          sampler, counters, dev history, RNG; see
                          :class:`mtdnn.run_state.RunState`)

Restoring all of it (plus the weights and the teacher, each through its own
``state_dict``) continues a killed run exactly as if it had never stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mtdnn._version import __version__
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_dir, sha256_of
from mtdnn.randomness import rng_state, set_rng_state
from mtdnn.run_dir import CONFIG_FILE, INFO_FILE, STEPS_DIR, RunDir, checkpoint_info
from mtdnn.run_state import RunState
from mtdnn.schema import to_dict
from mtdnn.smart import MeanTeacher
from mtdnn.task_def import TaskDef, load_task_file

if TYPE_CHECKING:  # mtdnn.model imports transformers (seconds); reading records needs none
    from mtdnn.config import TrainConfig
    from mtdnn.model import MultiTaskModel

log = logging.getLogger(__name__)
ENCODER_DIR = "encoder"
HEADS_FILE = "heads.safetensors"
TASK_DEFS_FILE = "task_defs.yaml"
STATE_FILE = "training_state.pt"
TEACHER_FILE = "teacher.safetensors"
REQUIRED = (ENCODER_DIR, HEADS_FILE, TASK_DEFS_FILE, INFO_FILE, CONFIG_FILE)


def task_defs_yaml(tasks: dict[str, TaskDef]) -> str:
    """Task definitions in the ``task_defs/*.yaml`` format."""
    data = {}
    for name, task in tasks.items():
        spec = to_dict(task)
        del spec["name"]
        data[name] = spec
    return yaml.safe_dump(data, sort_keys=False)


def save_checkpoint(path: Path, model: MultiTaskModel, tokenizer: Any, config_yaml: str,
                    info: dict[str, Any], training_state: dict[str, Any] | None = None,
                    teacher: MeanTeacher | None = None) -> None:
    """Write ``model`` and its context to ``path`` atomically (replacing any old one)."""
    from mtdnn.model import quiet_transformers

    with atomic_dir(path) as tmp:
        with quiet_transformers():
            model.encoder.save_pretrained(tmp / ENCODER_DIR)
        tokenizer.save_pretrained(tmp / ENCODER_DIR)
        heads = {f"{task}.{key}": value.detach().cpu().contiguous()
                 for task, head in model.heads.items() for key, value in head.state_dict().items()}
        save_file(heads, tmp / HEADS_FILE)
        (tmp / TASK_DEFS_FILE).write_text(task_defs_yaml(model.tasks), encoding="utf-8")
        (tmp / CONFIG_FILE).write_text(config_yaml, encoding="utf-8")
        (tmp / INFO_FILE).write_text(json.dumps({**info, "mtdnn_version": __version__},
                                                indent=2) + "\n", encoding="utf-8")
        if teacher is not None:
            state = teacher.state_dict()
            save_file({k: v.detach().cpu().contiguous() for k, v in state["model"].items()},
                      tmp / TEACHER_FILE, metadata={"updates": str(state["updates"])})
        if training_state is not None:
            torch.save(training_state, tmp / STATE_FILE)


def save_last(run: RunDir, model: MultiTaskModel, tokenizer: Any, config_yaml: str,
              info: dict[str, Any], training_state: dict[str, Any],
              teacher: MeanTeacher | None, is_best: bool, keep_last_n: int | None) -> None:
    """The run's resumable ``last`` checkpoint; copied to ``best`` when its score is the
    best so far, and to ``checkpoints/step-<N>`` when ``keep_last_n`` step copies are
    kept (the oldest deleted)."""
    save_checkpoint(run.last, model, tokenizer, config_yaml, info, training_state, teacher)
    steps = run.path / STEPS_DIR
    copies = ([run.best] if is_best else []) + \
        ([steps / f"step-{info['step']}"] if keep_last_n else [])
    for target in copies:
        copy_checkpoint(run.last, target)
    if keep_last_n:  # the newest keep_last_n step copies stay
        kept = sorted(steps.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
        for old in kept[:-keep_last_n]:
            shutil.rmtree(old, ignore_errors=True)


def copy_checkpoint(source: Path, target: Path) -> None:
    """Copy a checkpoint folder atomically (``last`` → ``best``), without the resume state:
    runs resume from ``last``."""
    with atomic_dir(target) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns(STATE_FILE))


def check_checkpoint(path: Path) -> None:
    """Raise a clear error unless ``path`` is a complete checkpoint folder."""
    if not path.is_dir():
        raise MtdnnError("checkpoint folder not found", file=path,
                         allowed="a folder written by train.py, e.g. runs/<name>/best")
    missing = [name for name in REQUIRED if not (path / name).exists()]
    if missing:
        raise MtdnnError(f"not a complete checkpoint: {', '.join(missing)} missing", file=path,
                         allowed=f"a folder holding {', '.join(REQUIRED)}")


def read_info(path: Path) -> dict[str, Any]:
    """A complete checkpoint's ``checkpoint.json`` (step, epoch, dev metrics, version)."""
    check_checkpoint(path)
    info = checkpoint_info(path)
    assert info is not None  # check_checkpoint found the file
    return info


def weights_fingerprint(path: Path) -> str:
    """sha256 over a checkpoint's encoder and head weights: the same for two folders that
    hold the same model, whatever their names or save times."""
    check_checkpoint(path)
    digest = hashlib.sha256()
    for file in [*sorted((path / ENCODER_DIR).glob("*.safetensors")), path / HEADS_FILE]:
        digest.update(sha256_of(file).encode())
    return digest.hexdigest()


def load_checkpoint_tasks(path: Path) -> dict[str, TaskDef]:
    """The task definitions stored in a checkpoint."""
    check_checkpoint(path)
    return load_task_file(path / TASK_DEFS_FILE)


def load_heads(path: Path) -> dict[str, torch.Tensor]:
    """The head weights of checkpoint ``path``; a truncated file is a user error."""
    try:
        return load_file(path / HEADS_FILE)
    except Exception as error:  # safetensors' own error type for a bad header
        raise MtdnnError(f"cannot read the head weights (a truncated or corrupt file?): "
                         f"{str(error).splitlines()[0]}", file=path / HEADS_FILE,
                         allowed="a checkpoint written whole by train.py") from None


def _head_state(heads: dict[str, torch.Tensor], task: str) -> dict[str, torch.Tensor]:
    prefix = f"{task}."
    return {key[len(prefix):]: value for key, value in heads.items() if key.startswith(prefix)}


def load_model(path: Path) -> tuple[MultiTaskModel, Any]:
    """The model (encoder + every head) and tokenizer saved in checkpoint ``path``."""
    from mtdnn.model import MultiTaskModel, load_encoder

    tasks = load_checkpoint_tasks(path)
    encoder, tokenizer = load_encoder(str(path / ENCODER_DIR))
    model = MultiTaskModel(encoder, tasks)
    heads = load_heads(path)
    for task, head in model.heads.items():
        head.load_state_dict(_head_state(heads, task))
    return model, tokenizer


def init_heads_from(model: MultiTaskModel, path: Path) -> list[str]:
    """Copy into ``model`` the heads of tasks that ``path`` has with the same type and
    labels; other heads stay fresh. Returns the names of the heads copied."""
    saved_tasks = load_checkpoint_tasks(path)
    heads = load_heads(path)
    copied = []
    for name, task in model.tasks.items():
        saved = saved_tasks.get(name)
        if saved is None or (saved.type, saved.labels) != (task.type, task.labels):
            continue
        model.heads[name].load_state_dict(_head_state(heads, name))
        copied.append(name)
    return copied


def keep_model_only(run_dir: Path) -> int:
    """Delete what only resuming or dev selection reads from a finished run (its optimizer
    state, mean teacher, ``best`` and step checkpoints), keeping ``last`` loadable; returns
    the bytes freed. A SMART run keeps about a sixth of its bytes."""
    doomed = [run_dir / "best", run_dir / STEPS_DIR, run_dir / "last" / STATE_FILE,
              run_dir / "last" / TEACHER_FILE]
    freed = 0
    for path in doomed:
        if path.is_dir():
            freed += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            shutil.rmtree(path)
        elif path.is_file():
            freed += path.stat().st_size
            path.unlink()
    return freed


def training_state(state: RunState, optimizer: torch.optim.Optimizer, scheduler: Any,
                   scaler: torch.amp.GradScaler) -> dict[str, Any]:
    """Everything besides the weights that resuming needs."""
    return {
        "run": {**state.__dict__, "running": dict(state.running)},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": rng_state(),
    }


# What a checkpoint's config.yaml gives prediction when a key is absent (the run
# config's defaults).
PREDICTION_DEFAULTS = {"max_seq_len": 128, "eval_batch_size": 128}


def saved_run_config(path: Path) -> dict[str, Any]:
    """The run config saved in checkpoint ``path``, with the keys prediction reads filled
    in from the defaults where an older checkpoint lacks them."""
    from mtdnn.schema import load_yaml

    saved = load_yaml(path / CONFIG_FILE) if (path / CONFIG_FILE).is_file() else None
    return {**PREDICTION_DEFAULTS, **(saved if isinstance(saved, dict) else {})}


def state_types() -> list[Any]:
    """The types besides torch's own that a saved training state holds, and nothing else:
    numpy's (its generator state is an array of uint32 words; dev metrics may be numpy
    scalars) and torch's version string (the machine each step was trained on)."""
    import numpy as np
    from torch.torch_version import TorchVersion

    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype,
            *(type(np.dtype(kind)) for kind in (np.uint32, np.int64, np.float64, np.float32)),
            TorchVersion]


def load_training_state(file: Path) -> dict[str, Any]:
    """``training_state.pt`` through torch's weights-only unpickler: tensors, containers,
    numbers and strings, and the numpy types of :func:`state_types`. A pickle can name
    any function to call while it loads; a file that names anything else is refused before
    any of it runs, so resuming from a folder someone else wrote cannot run their code."""
    try:
        with torch.serialization.safe_globals(state_types()):
            saved = torch.load(file, weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL ([\w.]+)", str(error))
        raise MtdnnError(
            "refused to load this training state: it asks to call "
            f"{found.group(1) if found else 'a function'} while it is read, which a training "
            "state written by mtdnn never does; loading it could run code from whoever wrote "
            "the file", file=file, key="resume",
            allowed="a checkpoint written by mtdnn; or start afresh from its weights with "
                    "init_checkpoint=<the checkpoint folder> instead of resume") from None
    if not isinstance(saved, dict) or not {"run", "optimizer", "rng"} <= set(saved):
        raise MtdnnError("not a training state written by mtdnn (no run, optimizer and rng "
                         "entries)", file=file, key="resume",
                         allowed="the last/ checkpoint of an mtdnn run")
    return saved


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
    from mtdnn.config import EXTENDABLE
    from mtdnn.optimization import follow_new_schedule  # (transformers: only for training)

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
    from mtdnn.model import MultiTaskModel, load_encoder

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
