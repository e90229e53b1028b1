"""A checkpoint is one folder, written atomically (temporary folder, then rename)::

    encoder/              save_pretrained safetensors + tokenizer: loads in plain transformers
    heads.safetensors     one tensor per head parameter, keyed "<task>.<param>"
    task_defs.yaml        the task definitions the heads were built from
    config.yaml           the resolved run config that wrote it
    checkpoint.json       step, epoch, dev metrics, package version
    teacher.safetensors   with SMART's Bregman term: the mean teacher (encoder + heads)
    training_state.pt     optional: what resuming needs (optimizer, scheduler, ...)
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import load_file, save_file

from mtdnn import __version__
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_dir, sha256_of
from mtdnn.model import MultiTaskModel, load_encoder, quiet_transformers
from mtdnn.schema import to_dict
from mtdnn.smart import MeanTeacher
from mtdnn.task_def import TaskDef, load_task_file

log = logging.getLogger(__name__)
ENCODER_DIR = "encoder"
HEADS_FILE = "heads.safetensors"
TASK_DEFS_FILE = "task_defs.yaml"
INFO_FILE = "checkpoint.json"
STATE_FILE = "training_state.pt"
TEACHER_FILE = "teacher.safetensors"
CONFIG_FILE = "config.yaml"
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
    with atomic_dir(path) as tmp:
        with quiet_transformers():
            model.encoder.save_pretrained(tmp / ENCODER_DIR)
        tokenizer.save_pretrained(tmp / ENCODER_DIR)
        heads = {f"{task}.{key}": value.detach().cpu().contiguous()
                 for task, head in model.heads.items() for key, value in head.state_dict().items()}
        save_file(heads, tmp / HEADS_FILE)
        (tmp / TASK_DEFS_FILE).write_text(task_defs_yaml(model.tasks), encoding="utf-8")
        (tmp / "config.yaml").write_text(config_yaml, encoding="utf-8")
        (tmp / INFO_FILE).write_text(json.dumps({**info, "mtdnn_version": __version__},
                                                indent=2) + "\n", encoding="utf-8")
        if teacher is not None:
            save_file({k: v.detach().cpu().contiguous() for k, v in
                       teacher.model.state_dict().items()}, tmp / TEACHER_FILE,
                      metadata={"updates": str(teacher.updates)})
        if training_state is not None:
            torch.save(training_state, tmp / STATE_FILE)


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


def keep_recent(run_dir: Path, step: int, keep: int) -> None:
    """Copy ``last`` to ``checkpoints/step-<step>`` and delete all but the newest ``keep``."""
    folder = run_dir / "checkpoints"
    copy_checkpoint(run_dir / "last", folder / f"step-{step}")
    saved = sorted(folder.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    for old in saved[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
