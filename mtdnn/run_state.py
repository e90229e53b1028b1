"""What changes as training goes, and how it is saved and restored for exact resume.

A ``last`` checkpoint carries ``training_state.pt``: the optimizer, LR scheduler and
grad-scaler states, the sampler's state at the start of the current epoch and the position
in that epoch, the counters, the dev history, and the python / numpy / torch random
states. Restoring all of it (plus the weights and the SMART teacher) continues a killed
run exactly as if it had never stopped.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, safe_open

from mtdnn.checkpoint import STATE_FILE, TEACHER_FILE, check_checkpoint
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_write_text
from mtdnn.sampling import Sampler
from mtdnn.smart import MeanTeacher


@dataclass
class RunState:
    """Counters, dev history and not-yet-logged losses of one run."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # complete epochs
    position: int = 0  # minibatches of the current epoch consumed
    micro: int = 0  # minibatches consumed in all (gradient accumulation)
    best_score: float = -float("inf")
    adv_skipped: int = 0
    nonfinite_skipped: int = 0
    evals: list[dict[str, Any]] = field(default_factory=list)
    running: defaultdict = field(default_factory=lambda: defaultdict(list))
    sampler_state: dict[str, Any] = field(default_factory=dict)

    def smoothed_losses(self) -> dict[str, str]:
        """Mean task loss per task since the last log line (for the progress bar)."""
        return {key.split("/")[0]: f"{np.mean(values):.3f}"
                for key, values in self.running.items() if key.endswith("/loss")}


def sampler_state(sampler: Sampler) -> dict[str, Any]:
    """The sampler's state now: its generator's state and any queues it keeps."""
    extra = sampler.state_dict() if hasattr(sampler, "state_dict") else {}
    return {"rng": sampler.rng.bit_generator.state, "extra": extra}


def restore_sampler(sampler: Sampler, state: dict[str, Any]) -> None:
    if not state:
        return
    sampler.rng.bit_generator.state = state["rng"]
    if state["extra"]:
        sampler.load_state_dict(state["extra"])


def training_state(state: RunState, optimizer: torch.optim.Optimizer, scheduler: Any,
                   scaler: torch.amp.GradScaler) -> dict[str, Any]:
    """Everything besides the weights that resuming needs."""
    return {
        "run": {**state.__dict__, "running": dict(state.running)},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
    }


def restore_training_state(path: Path, optimizer: torch.optim.Optimizer, scheduler: Any,
                           scaler: torch.amp.GradScaler, teacher: MeanTeacher | None
                           ) -> RunState:
    """Load ``training_state.pt`` (and the teacher) of checkpoint ``path`` into the run."""
    saved = torch.load(path / STATE_FILE, weights_only=False)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    scaler.load_state_dict(saved["scaler"])
    if teacher is not None:
        if not (path / TEACHER_FILE).is_file():
            raise MtdnnError("the checkpoint has no SMART teacher, but this run keeps one",
                             file=path, key="resume", allowed="resume with the same smart.*")
        teacher.model.load_state_dict(load_file(path / TEACHER_FILE))
        with safe_open(path / TEACHER_FILE, "pt") as handle:
            teacher.updates = int(handle.metadata()["updates"])
    rng = saved["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    run = saved["run"]
    return RunState(**{**run, "running": defaultdict(list, run["running"])})


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


def check_same_config(saved_yaml: str, current: dict[str, Any], path: Path,
                      may_differ: tuple[str, ...] = ("resume", "progress_bar")) -> None:
    """Resuming with other settings would not continue the same run: name what differs."""
    import yaml

    saved = yaml.safe_load(saved_yaml)
    if saved.get("precision") == "auto":  # written before runs recorded the resolved one,
        saved["precision"] = "fp32"       # when auto meant fp32 on a CPU
    differing = sorted(k for k in set(saved) | set(current)
                       if k not in may_differ and saved.get(k) != current.get(k))
    if differing:
        key = differing[0]
        raise MtdnnError(f"the run to resume has {key}={saved.get(key)!r}, this one "
                         f"{current.get(key)!r}", file=path / "config.yaml", key=key,
                         allowed="the same config as the run being resumed "
                                 "(only resume and progress_bar may change)")


def truncate_metrics(path: Path, step: int) -> None:
    """Drop ``metrics.jsonl`` lines written after ``step`` (a killed run's tail)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
            if line.strip() and line.endswith("\n") and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(keep))
