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
                          :class:`mtdnn.runs.run_state.RunState`)

``encoder/`` and ``heads.safetensors`` are the model's weights, which
:mod:`mtdnn.modeling.weights` writes and reads. Restoring all of it (the weights and the
teacher each through its owner) continues a killed run exactly as if it had never stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mtdnn._version import __version__
from mtdnn.config.schema import to_dict
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_dir, sha256_of
from mtdnn.modeling.weights import ENCODER_DIR, HEADS_FILE, load_heads, save_weights
from mtdnn.runs.run_dir import CONFIG_FILE, INFO_FILE, STEPS_DIR, RunDir, checkpoint_info
from mtdnn.runs.run_state import RunState
from mtdnn.tasks.task_def import CHECKPOINT_TASK_DEFS, TaskDef, load_task_file

# torch (and transformers, through the model) is imported by the functions that read or
# write tensors: a checkpoint's task definitions, info and config are read without it, so
# that prediction checks its arguments, and a grid its records, in a fraction of a second.
if TYPE_CHECKING:
    import torch

    from mtdnn.modeling.model import MultiTaskModel
    from mtdnn.modeling.smart import MeanTeacher


log = logging.getLogger(__name__)


TASK_DEFS_FILE = CHECKPOINT_TASK_DEFS


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
    import torch
    from safetensors.torch import save_file

    with atomic_dir(path) as tmp:
        save_weights(model, tmp)
        tokenizer.save_pretrained(tmp / ENCODER_DIR)
        (tmp / TASK_DEFS_FILE).write_text(task_defs_yaml(model.tasks), encoding="utf-8")
        (tmp / CONFIG_FILE).write_text(config_yaml, encoding="utf-8")
        (tmp / INFO_FILE).write_text(json.dumps({**info, "mtdnn_version": __version__},
                                                indent=2) + "\n", encoding="utf-8")
        if teacher is not None:
            state = teacher.snapshot()
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


def load_model(path: Path) -> tuple[MultiTaskModel, Any]:
    """The model (encoder + every head) and tokenizer saved in checkpoint ``path``."""
    from mtdnn.modeling.model import build_model

    tasks, heads = load_checkpoint_tasks(path), load_heads(path)
    if missing := sorted(set(tasks) - set(heads)):
        raise MtdnnError(f"no weights for the heads of {missing}", file=path / HEADS_FILE,
                         allowed="a checkpoint written whole by train.py")
    return build_model(tasks, encoder_dir=path / ENCODER_DIR, heads=heads)


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
                   scaler: torch.amp.GradScaler, surgery_rng: Any) -> dict[str, Any]:
    """Everything besides the weights that resuming needs; ``surgery_rng``: the generator of
    PCGrad's projection order (a numpy ``Generator``)."""
    from mtdnn.runs.randomness import rng_state

    return {
        "run": {**state.__dict__, "running": dict(state.running)},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": rng_state(surgery_rng),
    }


# What a checkpoint's config.yaml gives prediction when a key is absent (the run
# config's defaults).
PREDICTION_DEFAULTS = {"max_seq_len": 128, "eval_batch_size": 128}


def saved_run_config(path: Path) -> dict[str, Any]:
    """The run config saved in checkpoint ``path``, with the keys prediction reads filled
    in from the defaults where an older checkpoint lacks them."""
    from mtdnn.config.schema import load_yaml

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
    import torch

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
