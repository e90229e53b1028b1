"""A run folder's layout, and the one place that reads it.

    <run>/config.yaml     the resolved run config
    <run>/metrics.jsonl   train lines (losses, logged SMART terms) and dev evaluations
    <run>/summary.json    written when the run ends: steps, best and last metrics, timing
    <run>/train.log       the run's log, opening with the full config
    <run>/tensorboard/    the same scalars for tensorboard
    <run>/last/           the resumable checkpoint (mtdnn.checkpoint owns what is inside)
    <run>/best/           the best checkpoint by best_metric
    <run>/checkpoints/    step checkpoints kept by keep_last_n

The trainer writes these files; everyone else (the experiment runner, inference, the
interrupt message) asks :class:`RunDir` for them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Everything a run writes at its top level: what overwrite=true replaces.
RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json", "train.log", "last", "best",
             "tensorboard", "checkpoints")


@dataclass(frozen=True)
class RunDir:
    """One run folder."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def summary_file(self) -> Path:
        return self.path / "summary.json"

    @property
    def log(self) -> Path:
        return self.path / "train.log"

    @property
    def last(self) -> Path:
        return self.path / "last"

    @property
    def best(self) -> Path:
        return self.path / "best"

    def holds_run(self) -> bool:
        """Whether anything a run writes is here."""
        return any((self.path / name).exists() for name in RUN_FILES)

    def finished(self) -> bool:
        """Whether the run ended here (its summary) with its final checkpoint."""
        return self.summary_file.is_file() and self.last.is_dir()

    def summary(self) -> dict[str, Any]:
        return json.loads(self.summary_file.read_text(encoding="utf-8"))

    def last_step(self) -> int | None:
        """The step the ``last`` checkpoint holds, or None before the first one."""
        info = self.last / "checkpoint.json"
        if not info.is_file():
            return None
        return int(json.loads(info.read_text(encoding="utf-8"))["step"])

    def entries(self, kind: str) -> list[dict[str, Any]]:
        """The ``metrics.jsonl`` lines of one kind (``train`` or ``eval``), in order."""
        if not self.metrics.is_file():
            return []
        lines = self.metrics.read_text(encoding="utf-8").split("\n")
        return [entry for line in lines if line.strip()
                for entry in [json.loads(line)] if entry.get("kind") == kind]

    def evaluations(self) -> list[dict[str, Any]]:
        """Every dev evaluation (step, epoch, metrics): the learning curve."""
        return [{"step": e["step"], "epoch": e["epoch"], "metrics": e["metrics"]}
                for e in self.entries("eval")]

    def logged_terms(self, names: tuple[str, ...]) -> dict[str, dict[str, float]]:
        """Median and maximum over the train lines of each of ``names`` that was logged."""
        import numpy as np

        train = self.entries("train")
        found = {}
        for name in names:
            values = [e[name] for e in train if name in e]
            if values:
                found[name] = {"median": float(np.median(values)),
                               "max": float(np.max(values))}
        return found
