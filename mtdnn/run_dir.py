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

import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtdnn.errors import Interrupted, MtdnnError
from mtdnn.files import atomic_write_text, check_output_folder, read_text, write_error

if TYPE_CHECKING:
    from mtdnn.config import TrainConfig

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

    def interrupted(self) -> Interrupted:
        """Ctrl-C: what the run's ``last`` checkpoint holds (saved whole or not at all)
        and how to continue from it."""
        step = self.last_step()
        if step is None:
            return Interrupted("interrupted before the first checkpoint; nothing to resume",
                               file=self.path, allowed="start the run again (overwrite=true)")
        return Interrupted(f"interrupted; the last checkpoint holds step {step}: resume with "
                           f"resume={self.path}", file=self.path)

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


def check_run_dir(config: TrainConfig, resume_from: Path | None) -> Path:
    """Check, writing nothing, that the run folder can take this run.

    A folder that already holds a run is continued only with ``resume`` and replaced only
    with ``overwrite=true``; otherwise it is an error, so no result is lost by accident.
    ``overwrite`` never deletes the checkpoint the run starts from.
    """
    from mtdnn.schema import to_dict

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
    # Checked again: another process may have started a run in this folder while this one
    # loaded its model and data.
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
    from mtdnn.config import config_to_yaml

    atomic_write_text(RunDir(run_dir).config, config_to_yaml(config))
    return run_dir


def check_same_config(saved_yaml: str, current: dict[str, Any], path: Path,
                      may_differ: tuple[str, ...] = ("resume", "overwrite", "progress_bar")
                      ) -> None:
    """Resuming with other settings would not continue the same run: name what differs.
    ``overwrite`` says how a run started (a grid replaces a run folder it made itself),
    not how it trains, so a resume need not repeat it."""
    import yaml

    saved = yaml.safe_load(saved_yaml)
    if saved.get("precision") == "auto":  # written before runs recorded the resolved one,
        saved["precision"] = "fp32"       # when auto meant fp32 on a CPU
    saved = as_current(saved, RunDir(path).config)
    differing = sorted(k for k in set(saved) | set(current)
                       if k not in may_differ and saved.get(k) != current.get(k)
                       and not extends(saved, current, k))
    if differing:
        key = differing[0]
        raise MtdnnError(f"the run to resume has {key}={saved.get(key)!r}, this one "
                         f"{current.get(key)!r}", file=RunDir(path).config, key=key,
                         allowed="the same config as the run being resumed (only resume, "
                                 "overwrite and progress_bar may change, and max_steps, "
                                 "epochs or min_steps may grow to extend it)")


def as_current(saved: dict[str, Any], source: Path) -> dict[str, Any]:
    """A run config saved by an older version, read as this version reads it: keys added
    since take their defaults (each keeps the former behaviour: no label smoothing, loss
    weight 1, ...), renamed values their new names. So a run started before a key existed
    resumes under a version that has it; a key whose default changed since keeps the value
    the run had."""
    from mtdnn.config import resolve_config, with_former_teacher
    from mtdnn.schema import to_dict

    return to_dict(resolve_config(with_former_teacher(saved), origin=source))


# Keys that may grow when a run is resumed: the run is extended, and its schedule is the
# longer run's from there on (as Hugging Face Trainer does).
EXTENDABLE = ("max_steps", "epochs", "min_steps")


def extends(saved: dict[str, Any], current: dict[str, Any], key: str) -> bool:
    """Whether ``current`` lengthens the saved run in ``key``."""
    old, new = saved.get(key), current.get(key)
    return key in EXTENDABLE and isinstance(new, int) and (old is None or new >= old)
