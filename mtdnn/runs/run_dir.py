"""A run folder's layout, and the one place that reads it.

    <run>/config.yaml     the resolved run config
    <run>/metrics.jsonl   train lines (losses, logged SMART terms) and dev evaluations
    <run>/summary.json    written when the run ends: steps, best and last metrics, timing
    <run>/train.log       the run's log, opening with the full config
    <run>/tensorboard/    the same scalars for tensorboard
    <run>/last/           the resumable checkpoint (mtdnn.runs.checkpoint owns what is inside)
    <run>/best/           the best checkpoint by best_metric
    <run>/checkpoints/    step checkpoints kept by keep_last_n

The trainer writes these files; everyone else (the experiment runner, inference, the
interrupt message) asks :class:`RunDir` for them. A run checks its folder before it builds
anything (:func:`plan_run_dir`) and creates it once everything else has been checked
(:meth:`PlannedRun.start`), so a failed start leaves no folder that looks like a run.
"""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtdnn.errors import Interrupted, MtdnnError
from mtdnn.files import atomic_write_text, check_output_folder, read_text, write_error

if TYPE_CHECKING:
    from mtdnn.config.train_config import TrainConfig

CONFIG_FILE = "config.yaml"  # the resolved config: in the run folder and in each checkpoint
INFO_FILE = "checkpoint.json"  # a checkpoint's step, epoch, dev metrics and version
STEPS_DIR = "checkpoints"  # keep_last_n's step-<N> copies of ``last``
# Everything a run writes at its top level: what overwrite=true replaces.
RUN_FILES = (CONFIG_FILE, "metrics.jsonl", "summary.json", "train.log", "last", "best",
             "tensorboard", STEPS_DIR)


@dataclass(frozen=True)
class RunDir:
    """One run folder."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def config(self) -> Path:
        return self.path / CONFIG_FILE

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
        return checkpoint_step(self.last)

    def interrupted(self) -> Interrupted:
        """Ctrl-C: what the run's ``last`` checkpoint holds (saved whole or not at all)
        and how to continue from it."""
        step = self.last_step()
        if step is None:
            return Interrupted("interrupted before the first checkpoint; nothing to resume",
                               file=self.path, allowed="start the run again (overwrite=true)")
        return Interrupted(f"interrupted; the last checkpoint holds step {step}: continue with "
                           f"mtdnn-train resume={self.path}", file=self.path)

    @functools.cached_property
    def _logged(self) -> list[dict[str, Any]]:
        """``metrics.jsonl``, parsed once (a record reads its evaluations and its terms)."""
        if not self.metrics.is_file():
            return []
        lines = self.metrics.read_text(encoding="utf-8").split("\n")
        return [json.loads(line) for line in lines if line.strip()]

    def entries(self, kind: str) -> list[dict[str, Any]]:
        """The ``metrics.jsonl`` lines of one kind (``train`` or ``eval``), in order."""
        return [entry for entry in self._logged if entry.get("kind") == kind]

    def truncate_metrics(self, step: int) -> None:
        """Drop ``metrics.jsonl`` lines written after ``step`` (a killed run's tail), so a
        resumed run's log reads as if it had never stopped."""
        if not self.metrics.is_file():
            return
        keep = [line for line in self.metrics.read_text(encoding="utf-8").splitlines(True)
                if line.strip() and line.endswith("\n") and json.loads(line)["step"] <= step]
        atomic_write_text(self.metrics, "".join(keep))
        self.__dict__.pop("_logged", None)

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


def checkpoint_info(checkpoint: Path) -> dict[str, Any] | None:
    """A checkpoint folder's ``checkpoint.json`` (step, epoch, dev metrics, version), or
    None without one; one that cannot be read is an error naming it."""
    file = checkpoint / INFO_FILE
    if not file.is_file():
        return None
    allowed = "a checkpoint written whole by train.py"
    try:
        info = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MtdnnError(f"cannot read it: {error}", file=file, allowed=allowed) from None
    if not isinstance(info, dict):
        raise MtdnnError(f"holds {type(info).__name__}, not a mapping", file=file,
                         allowed=allowed)
    if not isinstance(info.get("step"), int) or isinstance(info["step"], bool):
        raise MtdnnError(f"its step is {info.get('step')!r}, not a whole number", file=file,
                         key="step", allowed=allowed)
    return info


def checkpoint_step(checkpoint: Path) -> int | None:
    """The step a checkpoint folder holds, or None without one."""
    info = checkpoint_info(checkpoint)
    return None if info is None else info["step"]


@dataclass(frozen=True)
class PlannedRun:
    """A run folder checked to take a run, not written yet, and the resolved config as the
    run records it (``config.yaml``, the head of ``train.log``, each checkpoint's copy, the
    trackers' hyperparameters)."""

    run: RunDir
    config_yaml: str
    resume_from: Path | None
    overwrite: bool

    @property
    def settings(self) -> dict[str, Any]:
        """The resolved config as a mapping, read back from the text the run records."""
        import yaml

        return yaml.safe_load(self.config_yaml)

    def start(self) -> RunDir:
        """Create the run folder (replacing an old run only under ``overwrite``), record
        the config in it and, when resuming, drop the ``metrics.jsonl`` lines a killed run
        wrote after its checkpoint. Called once everything the run needs has been checked."""
        # Checked again: another process may have started a run in this folder while this
        # one loaded its model and data.
        check_free(self.run.path, self.resume_from, self.overwrite)
        if self.resume_from is None and self.overwrite:
            for name in RUN_FILES:
                path = self.run.path / name
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        try:
            self.run.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise write_error(self.run.path, error) from None
        for leftover in self.run.path.glob(".*.tmp"):  # a save that a kill interrupted
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink()
        if self.resume_from is not None:
            self.run.truncate_metrics(checkpoint_step(self.resume_from) or 0)
        atomic_write_text(self.run.config, self.config_yaml)
        return self.run


def plan_run_dir(config: TrainConfig, resume_from: Path | None) -> PlannedRun:
    """Check, writing nothing, that the run folder can take this run.

    A folder that already holds a run is continued only with ``resume`` and replaced only
    with ``overwrite=true``; otherwise it is an error, so no result is lost by accident.
    ``overwrite`` never deletes the checkpoint the run starts from. A resumed run must have
    the config of the run it continues (:func:`mtdnn.config.resuming.check_resumable`).
    """
    from mtdnn.config.resolve import config_to_yaml
    from mtdnn.config.resuming import check_resumable

    run_dir = Path(config.output_dir)
    check_free(run_dir, resume_from, config.overwrite)
    init = config.init_checkpoint
    if (resume_from is None and config.overwrite and init and RunDir(run_dir).holds_run()
            and Path(init).resolve().is_relative_to(run_dir.resolve())):
        raise MtdnnError("overwrite=true would delete init_checkpoint, which is inside "
                         "the output folder", file=init, key="init_checkpoint",
                         allowed="an output_dir that does not hold the start checkpoint")
    check_output_folder(run_dir, "output_dir", allowed="a folder path (new or holding a run)")
    if resume_from is not None:
        saved = RunDir(resume_from).config
        check_resumable(read_text(saved), config, saved)
    return PlannedRun(RunDir(run_dir), config_to_yaml(config), resume_from, config.overwrite)


def check_free(run_dir: Path, resume_from: Path | None, overwrite: bool) -> None:
    """A folder holding a run takes a new one only with ``overwrite=true``."""
    if resume_from is None and not overwrite and RunDir(run_dir).holds_run():
        raise MtdnnError("the output folder already holds a run", file=run_dir,
                         key="output_dir", allowed="another output_dir, resume=<run> to "
                         "continue it, or overwrite=true to replace it")
