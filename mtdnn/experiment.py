"""One runner for every experiment: named arms × tasks × subsets × seeds, stages in config.

    python -m mtdnn.experiment --config experiments/domain_adaptation.yaml [key=value ...]
    python -m mtdnn.experiment --config ... --report-only   # tables from finished runs only
    python -m mtdnn.experiment --config ... --publish       # also copy records and tables
                                                            # into publish_dir (tracked)
    python -m mtdnn.experiment --config ... --rescore-agreement  # the agreement breakdowns
                                        # again, from the finished runs' final models

An **arm** is a start point (the plain encoder, a checkpoint folder, or ``stage:<name>``)
plus training keys of its own, run by a backend (``mtdnn``: this project's trainer;
``hf_trainer``: Hugging Face ``Trainer``, the baseline). A **stage** is a multi-task run
the arms can start from; it is trained once per stage seed, and an arm that starts from it
runs every (stage seed, seed) pair, so stage-1 variance is in its spread. Each run fine-
tunes one task on one subset (drawn by ``python -m data_prep subsets``; ``full`` is the
task's whole train file), or, with no ``tasks`` given, trains ``train.tasks`` together.

Each finished run leaves a ``result.json`` (the record): its dev metrics, the training keys
it ran with, its start weights' fingerprint and its logged SMART terms. A run with a
record is skipped (in ``output_dir``, or already published), an interrupted one resumes
from its last checkpoint, and several workers may share a grid. A record whose training
keys or start weights differ from the config's now is an error, not a silent mix.
Results: ``results.csv`` (one row per run and metric), ``results.md`` (see
:mod:`mtdnn.report` for the two layouts) and ``results.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mtdnn import report
from mtdnn.checkpoint import continue_keys, keep_model_only, weights_fingerprint
from mtdnn.config import apply_override, config_from_dict, load_mapping
from mtdnn.errors import MtdnnError, add_debug_flag, run_cli
from mtdnn.files import atomic_write_json, atomic_write_text, make_output_dir, read_json
from mtdnn.schema import build, to_dict

log = logging.getLogger(__name__)

FULL = "full"            # the subset that is a task's whole train file
MULTITASK = "multitask"  # the task of a run that trains train.tasks together
STAGE_PREFIX = "stage:"
RECORD = "result.json"
# Keys that change how a run looks or how often it saves, not what it learns: a finished
# run stays valid (records written before a key joined this list still compare equal).
COSMETIC_TRAIN_KEYS = ("progress_bar", "cache_dir", "log_every_steps", "save_every_steps")
# What the hf_trainer backend reads; any other training key would be silently ignored.
HF_TRAINER_KEYS = ("epochs", "max_steps", "batch_size", "optimizer.lr", "max_seq_len",
                   "encoder", "encoder_layers", "precision", *COSMETIC_TRAIN_KEYS,
                   "eval_every_epoch", "tasks", "data_dir", "seed", "output_dir")


@dataclass(frozen=True)
class Arm:
    """A start point and training keys of its own, e.g. ``{train: {smart: {enabled: true}}}``."""

    # a checkpoint folder, "stage:<name>" (a stage of this config), or null: the encoder
    init: str | None = None
    train: dict[str, Any] = field(default_factory=dict)
    backend: Literal["mtdnn", "hf_trainer"] = "mtdnn"
    seeds: tuple[int, ...] | None = None  # instead of the experiment's seeds
    tasks: tuple[str, ...] | None = None  # only these of the experiment's tasks


@dataclass(frozen=True)
class Stage:
    """A multi-task run that arms start from: a train config file and/or training keys."""

    config: str | None = None
    train: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = (13,)


@dataclass(frozen=True)
class Agreement:
    """Figure 2's breakdown after each run of an NLI task: accuracy and KL to the human
    label distribution per annotator-agreement level (:mod:`mtdnn.agreement`)."""

    chaosnli: str  # ChaosNLI's jsonl for the task's dev pairs
    # the files scored: the dev file, or ChaosNLI's held-out pairs then a dev file as the rest
    rows: tuple[str, ...]
    subsets: tuple[str, ...] | None = None  # only the runs on these subsets (default: all)


@dataclass(frozen=True)
class ExperimentConfig:
    arms: dict[str, Arm]
    # each run fine-tunes one of these; none: each run trains train.tasks together
    tasks: tuple[str, ...] = ()
    # the same subsets for every task, or task -> its own; "full" is the whole train file
    subsets: tuple[str, ...] | dict[str, tuple[str, ...]] = (FULL,)
    subset_seed: int = 13
    seeds: tuple[int, ...] = (13, 14, 15)
    stages: dict[str, Stage] = field(default_factory=dict)
    # task -> {train: file, dev: file} instead of <data_dir>/<task>/{train,dev}.jsonl (e.g. a
    # tuning split drawn from train with `data_prep subsets --holdout` as dev)
    task_files: dict[str, dict[str, str]] = field(default_factory=dict)
    # Larger subsets appear in the table as "n/a (not run: ...)" instead of being trained.
    max_train_rows: int | None = None
    data_dir: str = "data"
    output_dir: str = "runs/experiment"
    publish_dir: str | None = None  # the tracked folder --publish copies records into
    # where the stages live (default <output_dir>/stages): experiments that declare a stage
    # with the same keys and name one stage_dir train it once and start from the same weights
    stage_dir: str | None = None
    # other experiments' folders (output or publish): a finished run there counts here when
    # it ran the same task files and seed with the same training keys, backend and start
    # weights; it is copied in with ``reused_from`` naming its source, never re-run
    reuse_from: tuple[str, ...] = ()
    agreement: dict[str, Agreement] = field(default_factory=dict)  # task -> its breakdown
    # the paper's numbers, arm -> column ("rte accuracy", "mrpc f1"; Table 5: "snli 1pct")
    # -> value: the report sets the paper's sign pattern beside ours
    paper: dict[str, dict[str, float]] = field(default_factory=dict)
    # A stage re-trained in a later session on another CPU (or thread count) comes out with
    # other weights in their last bits. error: stop; accept: record it as another
    # realization of the stage, keep the runs made from the earlier one, start new runs
    # from the new one (each record names its start weights; the tables count realizations).
    retrained_stages: Literal["error", "accept"] = "error"
    # What a finished run keeps in output_dir beside its record. everything: its resumable
    # state and its best and last checkpoints; model: the last checkpoint's weights only,
    # what --rescore-agreement and predict.py read (a sixth of a SMART run's 520 MB: long
    # grids fill a disk). Stages keep everything. Applied as each run finishes and, to the
    # grid's runs finished earlier, whenever the grid is run (not by --report-only).
    finished_runs_keep: Literal["everything", "model"] = "everything"
    layout: Literal["tasks", "subsets"] = "tasks"  # Tables 3/4 or Table 5
    # the arm every other is compared with (Welch's p); none: every pair of arms
    baseline: str | None = None
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig keys for every run


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    arm: str
    task: str
    subset: str
    seed: int
    stage_seed: int | None = None

    @property
    def folder(self) -> Path:
        """The run's folder under the output (and publish) folder."""
        seed = f"seed{self.seed}" + (f"-stage{self.stage_seed}"
                                     if self.stage_seed is not None else "")
        return Path(self.arm) / self.task / self.subset / seed


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` laid over it, nested mappings merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        both_maps = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both_maps else value
    return out


def without_cosmetic(keys: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sorted(keys.items()) if k not in COSMETIC_TRAIN_KEYS}


def flat(keys: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in keys.items():
        if isinstance(value, dict) and key != "tasks":
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# --- config --------------------------------------------------------------------------

def load_experiment(path: str | Path | None, overrides: list[str]) -> ExperimentConfig:
    """Load the experiment YAML with ``key=value`` overrides; every arm's and stage's
    training keys are validated now, not in the tenth run."""
    data = load_mapping(path)
    declared = copy.deepcopy(data.get("tasks"))  # what the file runs, before overrides narrow it
    for override in overrides:
        apply_override(data, override)
    source = path or "command line"
    train_keys = data.get("train") or {}
    if not isinstance(train_keys, dict):
        raise MtdnnError(f"found {train_keys!r} ({type(train_keys).__name__}), expected a "
                         "mapping of training keys", file=path, key="train",
                         allowed="a mapping, e.g. train: {epochs: 3, batch_size: 32}")
    arms = data.get("arms")
    if isinstance(arms, dict):  # shorthand: `name: folder` or `name: null`
        data["arms"] = {name: {"init": value} if value is None or isinstance(value, str)
                        else value for name, value in arms.items()}
    config = build(ExperimentConfig, data, source=path)
    config = dataclasses.replace(config, train=train_keys)
    if not config.arms:
        raise MtdnnError("no arms given", file=path, key="arms",
                         allowed="a mapping of arm name -> {init, train, backend, seeds}")
    for task in config.tasks:
        task_subsets(config, task)  # every task has its subsets
    if config.baseline is not None and config.baseline not in config.arms:
        raise MtdnnError(f"baseline '{config.baseline}' is not an arm", file=path,
                         key="baseline", allowed=", ".join(config.arms))
    config = without_narrowed_tasks(config, declared)
    strangers = [t for t in config.agreement if t not in config.tasks]
    if strangers:
        raise MtdnnError(f"agreement names task '{strangers[0]}', which the experiment does "
                         "not run", file=path, key=f"agreement.{strangers[0]}",
                         allowed=", ".join(config.tasks) or "tasks given under tasks:")
    check_paper(config, path)
    for name in config.stages:
        config_from_dict(stage_run_keys(config, name),
                         source=f"{source} (stages.{name})")
    for name, arm in config.arms.items():
        if arm.init is not None and arm.init.startswith(STAGE_PREFIX):
            stage = arm.init.removeprefix(STAGE_PREFIX)
            if stage not in config.stages:
                raise MtdnnError(f"arm '{name}' starts from unknown stage '{stage}'",
                                 file=path, key=f"arms.{name}.init",
                                 allowed=", ".join(STAGE_PREFIX + s for s in config.stages)
                                 or "a stage declared under stages:")
        unknown = [t for t in arm.tasks or () if t not in config.tasks]
        if unknown:
            raise MtdnnError(f"arm '{name}' names task '{unknown[0]}', which the experiment "
                             "does not run", file=path, key=f"arms.{name}.tasks",
                             allowed=", ".join(config.tasks) or "tasks given under tasks:")
        keys = merged(config.train, arm.train)
        config_from_dict({"tasks": {"x": {}}, **keys},
                         source=f"{source} (train + arms.{name}.train)")
        if arm.backend == "hf_trainer":
            check_hf_keys(keys, name, path, arm)
    return config


def without_narrowed_tasks(config: ExperimentConfig, declared: object) -> ExperimentConfig:
    """The config without the paper's numbers and the agreement breakdowns of the tasks the
    file declares but an override took out (``tasks=[rte]`` runs a grid one task at a time:
    the other tasks' entries are set aside, not mistakes). An entry for a task the file
    never runs stays, for the checks to name it."""
    if not isinstance(declared, (list, tuple)):
        return config
    narrowed = {task for task in declared if task not in config.tasks}
    if not narrowed:
        return config
    paper = {arm: {label: value for label, value in numbers.items()
                   if label.split(" ", 1)[0] not in narrowed}
             for arm, numbers in config.paper.items()}
    agreement = {task: spec for task, spec in config.agreement.items() if task not in narrowed}
    return dataclasses.replace(config, paper=paper, agreement=agreement)


def check_paper(config: ExperimentConfig, path: str | Path | None) -> None:
    """The paper's numbers name arms and columns of this experiment (a misspelt one would
    drop out of the sign pattern without a word)."""
    from mtdnn.task_def import load_task_defs

    if not config.paper:
        return
    if config.layout == "subsets":
        allowed = [f"{t} {s}" for t in config.tasks for s in task_subsets(config, t)]
    else:
        known = load_task_defs(config.train.get("task_defs", ("packaged",)))
        allowed = [f"{t} {m}" for t in config.tasks if t in known for m in known[t].metrics]
    for arm, numbers in config.paper.items():
        if arm not in config.arms:
            raise MtdnnError(f"paper names arm '{arm}', which the experiment does not have",
                             file=path, key=f"paper.{arm}", allowed=", ".join(config.arms))
        for label in numbers:
            if label not in allowed:
                raise MtdnnError(f"paper.{arm} names column '{label}', which the table does not "
                                 "have", file=path, key=f"paper.{arm}.{label}",
                                 allowed=", ".join(allowed))


def task_subsets(config: ExperimentConfig, task: str) -> tuple[str, ...]:
    """The subsets a task runs on."""
    if task == MULTITASK:
        return (FULL,)
    if isinstance(config.subsets, dict):
        if task not in config.subsets:
            raise MtdnnError(f"no subsets given for task '{task}'", key="subsets",
                             allowed=f"a list for every task: {', '.join(config.tasks)}")
        return tuple(config.subsets[task])
    return config.subsets


def check_hf_keys(keys: dict[str, Any], arm: str, path: str | Path | None, spec: Arm) -> None:
    """The Trainer backend runs the plain encoder with the keys it maps; anything else
    would be ignored without a word, so it is an error."""
    if spec.init is not None:
        raise MtdnnError("the hf_trainer backend starts from the plain encoder only",
                         file=path, key=f"arms.{arm}.init", allowed="null")
    unread = sorted(k for k in flat(keys) if k not in HF_TRAINER_KEYS)
    if unread:
        raise MtdnnError(f"the hf_trainer backend does not read '{unread[0]}'", file=path,
                         key=f"arms.{arm}.train", allowed=", ".join(HF_TRAINER_KEYS))


def stage_run_keys(config: ExperimentConfig, name: str) -> dict[str, Any]:
    """The keys a stage trains with: its config file, with its ``train`` keys laid over it
    (its cosmetic keys too: a stage saves for resuming and logs as its config says)."""
    stage = config.stages[name]
    base = load_mapping(stage.config) if stage.config else {}
    keys = merged(base, stage.train)
    keys.pop("output_dir", None)
    keys.pop("seed", None)
    return {"data_dir": config.data_dir, **keys}


def stage_train_keys(config: ExperimentConfig, name: str) -> dict[str, Any]:
    """A stage's training keys as its record keeps them (what it learns: no cosmetic key)."""
    return without_cosmetic(stage_run_keys(config, name))


def arm_train_keys(config: ExperimentConfig, arm: str) -> dict[str, Any]:
    """The training keys a run of ``arm`` runs with (the experiment's and the arm's)."""
    return without_cosmetic(merged(config.train, config.arms[arm].train))


def stage_of(config: ExperimentConfig, arm: str) -> str | None:
    init = config.arms[arm].init
    return init.removeprefix(STAGE_PREFIX) if init and init.startswith(STAGE_PREFIX) else None


# --- grid --------------------------------------------------------------------------

def task_file(config: ExperimentConfig, task: str, split: str) -> str:
    return (config.task_files.get(task, {}).get(split)
            or str(Path(config.data_dir) / task / f"{split}.jsonl"))


def subset_sizes(config: ExperimentConfig, task: str) -> dict[str, dict[str, Any]]:
    """Each subset of ``task``: its train file, size, and whether it runs."""
    entries = {}
    drawn = [s for s in task_subsets(config, task) if s != FULL]
    manifest = subset_manifest(config, task, drawn) if drawn else {}
    for name in task_subsets(config, task):
        if name == FULL:
            file = Path(task_file(config, task, "train"))
            size = line_count(file)
            entries[name] = {"file": str(file), "size": size, "available": True}
        else:
            entries[name] = manifest[name]
    cap = config.max_train_rows
    for entry in entries.values():
        if cap is not None and entry["available"] and entry["size"] > cap:
            entry.update(available=False,
                         reason=f"not run: {entry['size']:,} rows > max_train_rows {cap:,}")
    return entries


def line_count(path: Path) -> int:
    if not path.is_file():
        return 0
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def subset_manifest(config: ExperimentConfig, task: str,
                    names: list[str]) -> dict[str, dict[str, Any]]:
    folder = Path(config.data_dir) / task / "subsets" / f"seed{config.subset_seed}"
    path = folder / "manifest.json"
    if not path.is_file():
        raise MtdnnError(f"no subsets of task '{task}'", file=path,
                         allowed=f"python -m data_prep subsets --data-dir {config.data_dir} "
                                 f"--task {task} --preset paper --seed {config.subset_seed}")
    manifest = read_json(path)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise MtdnnError("the manifest has no 'files' mapping", file=path,
                         allowed="a manifest written by python -m data_prep subsets")
    missing = [s for s in names if s not in files]
    if missing:
        raise MtdnnError(f"subset '{missing[0]}' of task '{task}' was never drawn", file=path,
                         key="subsets", allowed=", ".join([FULL, *files]))
    return {name: {**files[name], "file": files[name]["file"] and str(folder / files[name]["file"])}
            for name in names}


def grid_tasks(config: ExperimentConfig) -> tuple[str, ...]:
    return config.tasks or (MULTITASK,)


def cells(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]]) -> list[Cell]:
    """Every run of the grid whose subset is available, seed-major so that a partial
    experiment has every arm once before any twice."""
    out = []
    for arm, spec in config.arms.items():
        stage = stage_of(config, arm)
        stage_seeds = config.stages[stage].seeds if stage else (None,)
        for task in grid_tasks(config):
            if spec.tasks is not None and task not in spec.tasks:
                continue
            for subset in task_subsets(config, task):
                if not sizes[task][subset]["available"]:
                    continue
                out += [Cell(arm, task, subset, seed, stage_seed)
                        for seed in spec.seeds or config.seeds for stage_seed in stage_seeds]
    return sorted(out, key=lambda c: (c.seed, c.stage_seed or 0, list(config.arms).index(c.arm)))


def find_record(config: ExperimentConfig, relative: Path) -> Path | None:
    """A record in the output folder, or one already published."""
    roots = [Path(config.output_dir)] + ([Path(config.publish_dir)] if config.publish_dir else [])
    for root in roots:
        if (root / relative / RECORD).is_file():
            return root / relative / RECORD
    return None


def stage_folder(config: ExperimentConfig, name: str, seed: int) -> Path:
    root = Path(config.stage_dir) if config.stage_dir else Path(config.output_dir) / "stages"
    return root / name / f"seed{seed}"


def find_stage_record(config: ExperimentConfig, name: str, seed: int) -> Path | None:
    """A stage's record where it is trained, or one already published."""
    here = stage_folder(config, name, seed) / RECORD
    if here.is_file():
        return here
    return find_record(config, Path("stages") / name / f"seed{seed}")


# What must be equal for a finished run of another experiment to count as a run of this one.
REUSE_FIELDS = ("task", "train_file", "dev_file", "seed", "stage_seed", "backend",
                "train_keys", "start_fingerprint")


def reusable_record(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
                    fingerprint: str | None) -> Path | None:
    """A finished run in ``reuse_from`` that is this cell's run under another arm name."""
    wanted = {"task": cell.task, "train_file": entry["file"],
              "dev_file": task_file(config, cell.task, "dev"), "seed": cell.seed,
              "stage_seed": cell.stage_seed, "backend": config.arms[cell.arm].backend,
              "train_keys": arm_train_keys(config, cell.arm), "start_fingerprint": fingerprint}
    for root in config.reuse_from:
        if not Path(root).is_dir():
            log.warning("reuse_from: no folder %s (yet); nothing reused from it", root)
            continue
        for path in sorted(Path(root).glob(f"*/{cell.task}/*/*/{RECORD}")):
            record = read_json(path)
            record["train_keys"] = without_cosmetic(record.get("train_keys") or {})
            if all(record.get(name) == wanted[name] for name in REUSE_FIELDS):
                return path
    return None


def reuse(config: ExperimentConfig, cell: Cell, source: Path) -> None:
    """Copy a finished run of another experiment in as this cell's record."""
    record = {**read_json(source), "arm": cell.arm, "subset": cell.subset,
              "reused_from": str(source)}
    atomic_write_json(Path(config.output_dir) / cell.folder / RECORD, record)
    log.info("reused %s for %s", source, cell)


# --- checks --------------------------------------------------------------------------

def check_record(config: ExperimentConfig, cell: Cell, record: dict[str, Any], path: Path,
                 allowed: set[str | None] | None) -> None:
    """A finished run trained with other keys, or from other start weights, is an error:
    its number would sit in the table next to runs it cannot be compared with."""
    saved, now = without_cosmetic(record.get("train_keys") or {}), arm_train_keys(config, cell.arm)
    if saved != now:
        key = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))[0]
        raise MtdnnError(
            f"this finished run was trained with train.{key}={saved.get(key)!r}, the "
            f"experiment now has {now.get(key)!r}", file=path, key=f"train.{key}",
            allowed="the training keys the finished runs ran with, or a new output_dir (or "
                    "delete the finished runs to train them again)")
    if allowed is not None and record.get("start_fingerprint") not in allowed:
        raise MtdnnError(
            f"this finished run was trained from start weights "
            f"{str(record.get('start_fingerprint'))[:12]}, but arm '{cell.arm}' now starts "
            f"from weights {', '.join(str(a)[:12] for a in sorted(allowed, key=str))}",
            file=path, key=f"arms.{cell.arm}",
            allowed="the checkpoint the finished runs started from, or a new output_dir (or "
                    "delete the runs of this arm to train them again)")


def realizations(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A stage record's realizations (the weights each training of it gave), oldest first."""
    return record.get("realizations") or [
        {"weights_fingerprint": record["weights_fingerprint"], "machine": record.get("machine"),
         "train_seconds": record.get("train_seconds")}]


def stage_record(config: ExperimentConfig, name: str, seed: int) -> dict[str, Any] | None:
    path = find_stage_record(config, name, seed)
    if path is None:
        return None
    record = read_json(path)
    saved, now = without_cosmetic(record.get("train_keys") or {}), stage_train_keys(config, name)
    if saved != now:
        key = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))[0]
        raise MtdnnError(f"this stage was trained with {key}={saved.get(key)!r}, the "
                         f"experiment now has {now.get(key)!r}", file=path,
                         key=f"stages.{name}", allowed="the stage's keys as they were, or a "
                                                       "new output_dir")
    return record


def allowed_fingerprints(config: ExperimentConfig,
                         prints: dict[tuple[str, int | None], str | None]
                         ) -> dict[tuple[str, int | None], set[str | None]]:
    """(arm, stage seed) -> every start weight a finished run of it may have started from:
    the one in ``prints`` (:func:`start_fingerprints`), and for a stage each realization."""
    allowed: dict[tuple[str, int | None], set[str | None]] = {
        key: {value} for key, value in prints.items()}
    for arm in config.arms:
        stage = stage_of(config, arm)
        for seed in config.stages[stage].seeds if stage else ():
            record = stage_record(config, stage, seed)
            if record is not None:
                allowed[(arm, seed)] = {r["weights_fingerprint"] for r in realizations(record)}
    return allowed


def start_fingerprints(config: ExperimentConfig, running: bool
                       ) -> dict[tuple[str, int | None], str | None]:
    """(arm, stage seed) -> the start weights' fingerprint, where it is known now: None for
    the plain encoder; a checkpoint folder's own (which must exist to run); a stage's from
    its record."""
    prints: dict[tuple[str, int | None], str | None] = {}
    for arm, spec in config.arms.items():
        stage = stage_of(config, arm)
        if spec.init is None:
            prints[(arm, None)] = None
        elif stage is not None:
            for seed in config.stages[stage].seeds:
                record = stage_record(config, stage, seed)
                if record is not None:
                    prints[(arm, seed)] = record["weights_fingerprint"]
        elif Path(spec.init).is_dir():
            prints[(arm, None)] = weights_fingerprint(Path(spec.init))
        elif running:
            raise MtdnnError(f"arm '{arm}' starts from a checkpoint that is not there",
                             file=spec.init, key=f"arms.{arm}.init",
                             allowed="a checkpoint folder, stage:<name>, or null for the "
                                     "plain encoder")
    return prints


# --- a session's end ------------------------------------------------------------------

def parse_stop_by(text: str, now: datetime | None = None) -> datetime:
    """``--stop-by``: an ISO 8601 date-time (``2026-11-25T11:05Z``), or ``HH:MM``, the next
    such local time. A naive date-time is local time."""
    now = now or datetime.now().astimezone()
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})", text.strip())
    try:
        if clock:
            at = now.replace(hour=int(clock[1]), minute=int(clock[2]), second=0, microsecond=0)
            return at if at > now else at + timedelta(days=1)
        at = datetime.fromisoformat(text.strip())
    except ValueError as error:
        raise MtdnnError(f"--stop-by {text!r} is not a time ({error})", key="--stop-by",
                         allowed="HH:MM (the next such local time) or an ISO 8601 date-time, "
                                 "e.g. 2026-11-25T11:05Z") from None
    return at if at.tzinfo else at.astimezone()


def typical_seconds(config: ExperimentConfig, cell: Cell, entry: dict[str, Any]) -> float | None:
    """How long a run like ``cell`` takes: the median wall time of the finished runs with
    its task, training file and training keys (any arm name, seed or start weights), in
    this experiment's folders and ``reuse_from``'s. Before one has finished: its expected
    number of steps times the median time per step of the finished runs with its keys on
    other files, scaled by the bytes per example of the two files (a stand-in for their
    lengths in tokens: on 2026-11-25 an MNLI step took 0.63 of an RTE step, and its rows
    0.63 of the bytes). Before any run with its keys has: the slowest finished run on its
    training file (any keys). None before any of these."""
    keys = arm_train_keys(config, cell.arm)
    train_file = entry["file"] if cell.task != MULTITASK else None
    alike, same_file, per_step = {}, {}, {}
    for root in {Path(r) for r in (config.output_dir, config.publish_dir, *config.reuse_from)
                 if r}:
        for path in root.glob(f"*/*/*/*/{RECORD}"):
            record = read_json(path)
            if not record.get("wall_seconds"):
                continue
            record_keys = without_cosmetic(record.get("train_keys") or {})
            # a reused record is a copy of its source: the same run counts once
            run = (json.dumps(record_keys, sort_keys=True), record.get("train_file"),
                   record.get("seed"), record.get("stage_seed"), record.get("start_fingerprint"))
            seconds = whole_wall_seconds(record)
            if record_keys == keys and record.get("steps") and (
                    width := bytes_per_example(record.get("train_file"), record.get("train_size"))):
                per_step[run] = seconds / record["steps"] / width
            if record.get("task") != cell.task or record.get("train_file") != train_file:
                continue
            same_file[run] = seconds
            if record_keys == keys:
                alike[run] = seconds
    if alike:
        return float(np.median(list(alike.values())))
    width = bytes_per_example(train_file, entry["size"])
    if cell.task != MULTITASK and width and per_step:
        return (expected_steps(keys, entry["size"]) * width
                * float(np.median(list(per_step.values()))))
    return max(same_file.values()) if same_file else None


def whole_wall_seconds(record: dict[str, Any]) -> float:
    """A run's wall time, scaled up to all its steps where the process that finished it
    resumed it part-way (its ``wall_seconds`` time only the steps after ``resumed_from_step``)."""
    seconds, steps = float(record["wall_seconds"]), record.get("steps") or 0
    resumed = record.get("resumed_from_step") or 0
    return seconds * steps / (steps - resumed) if 0 < resumed < steps else seconds


def bytes_per_example(train_file: str | None, rows: int | None) -> float | None:
    """The mean size of a training file's rows, where the file is here."""
    if not train_file or not rows or not Path(train_file).is_file():
        return None
    return Path(train_file).stat().st_size / rows


def expected_steps(keys: dict[str, Any], size: int) -> int:
    """The optimizer steps of a one-task run on ``size`` examples (as the trainer counts
    them, with one batch per ``batch_size`` examples)."""
    train = config_from_dict({"tasks": {"x": {}}, **keys}, source="the experiment's train keys")
    return train.total_steps(math.ceil(size / train.batch_size))


def typical_stage_seconds(config: ExperimentConfig, name: str) -> float | None:
    """The median training time of a stage's realizations (any seed) that recorded it."""
    times = [r["train_seconds"] for seed in config.stages[name].seeds
             if (record := stage_record(config, name, seed)) is not None
             for r in realizations(record) if r.get("train_seconds")]
    return float(np.median(times)) if times else None


def fits_before(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
                stop_by: datetime) -> bool:
    """Whether ``cell`` (with its stage, if this machine must train that first) is expected
    to finish by ``stop_by``. A run cut off by a session's end may be lost with its run
    folder, so a worker leaves it for a later session and takes a shorter one. What no
    finished run can time (:func:`typical_seconds`) is counted as taking no time."""
    parts = [typical_seconds(config, cell, entry)]
    stage = stage_of(config, cell.arm)
    if stage is not None and not stage_trained(stage_folder(config, stage, cell.stage_seed)):
        parts.append(typical_stage_seconds(config, stage))
    known = [seconds for seconds in parts if seconds is not None]
    return finishes_in_time(sum(known) if known else None, stop_by, str(cell))


def work_left(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]]) -> str:
    """What is left of the grid and about how long one worker takes for it, judged as
    --stop-by judges (:func:`typical_seconds`): for planning sessions. A run that
    ``reuse_from`` already holds takes no time; a stage not yet trained is counted once."""
    prints = start_fingerprints(config, running=False)
    left = [cell for cell in cells(config, sizes) if find_record(config, cell.folder) is None
            and not ((cell.arm, cell.stage_seed) in prints and reusable_record(
                config, cell, sizes[cell.task][cell.subset], prints[(cell.arm, cell.stage_seed)]))]
    needed = {(stage, cell.stage_seed) for cell in left
              if (stage := stage_of(config, cell.arm)) is not None}
    stages = {key for key in needed if stage_record(config, *key) is None}  # one read each
    if not left:
        return "nothing left to run"
    times = [typical_seconds(config, cell, sizes[cell.task][cell.subset]) for cell in left]
    times += [typical_stage_seconds(config, stage) for stage, _ in stages]
    timed = [seconds for seconds in times if seconds is not None]
    summary = f"left: {len(left)} runs and {len(stages)} stages"
    if timed:
        summary += (f"; {len(timed)} of them like finished runs, about "
                    f"{sum(timed) / 3600:.1f} worker-hours")
    if len(timed) < len(times):
        summary += f"; {len(times) - len(timed)} like no finished run yet (not timed)"
    return summary


def finishes_in_time(expected: float | None, stop_by: datetime, what: str) -> bool:
    """Whether ``expected`` seconds (None: unknown, so yes) end by ``stop_by``; logs a no."""
    left = (stop_by - datetime.now().astimezone()).total_seconds()
    if expected is None or expected <= left:
        return True
    log.info("not started: %s takes about %.0f min, %.0f min left before --stop-by %s",
             what, expected / 60, max(left, 0) / 60, stop_by.isoformat(timespec="minutes"))
    return False


# --- running -----------------------------------------------------------------------

@contextlib.contextmanager
def claimed(folder: Path) -> Iterator[bool]:
    """Claim a run for this process (a ``.claim`` file holding its pid, created
    exclusively), so that several workers can share one grid; a claim whose process is
    gone is taken over. Yields whether this process holds the claim. A folder the holder
    leaves empty (a run it passed over) is removed, so that only started runs leave one."""
    claim = folder / ".claim"
    for _ in range(3):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileNotFoundError:
            continue  # another worker removed the empty folder meanwhile
        except FileExistsError:
            try:
                os.kill(int(claim.read_text() or 0), 0)
            except (ProcessLookupError, ValueError):
                claim.unlink(missing_ok=True)  # its worker died: take it over
                continue
            except PermissionError:
                pass
            yield False
            return
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        try:
            yield True
        finally:
            claim.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty: the run's files stay
                folder.rmdir()
        return
    yield False


STAGE_POLL_SECONDS = 30


def build_stage(config: ExperimentConfig, name: str, seed: int,
                wait: bool = True) -> tuple[Path, str] | None:
    """A stage's checkpoint and fingerprint: one worker trains it (claiming its folder);
    another that needs it waits for it (``wait``) or moves on (returns None)."""
    folder = stage_folder(config, name, seed)
    while True:
        with claimed(folder) as mine:
            if mine:
                return _build_stage(config, name, seed, folder)
        if not wait:
            log.info("stage %s seed %d is being trained by another worker; left to it for now",
                     name, seed)
            return None
        log.info("stage %s seed %d is being trained by another worker; waiting", name, seed)
        time.sleep(STAGE_POLL_SECONDS)


def build_stages(config: ExperimentConfig, stop_by: datetime | None = None) -> None:
    """Every stage seed an arm starts from (``--stages-only``: the long stage-1 runs can
    start before the fine-tuning settings are chosen); one claimed by another worker is
    left to it, and with ``stop_by`` one not expected to finish by then is left for later."""
    needed = {(stage, seed) for arm in config.arms if (stage := stage_of(config, arm))
              for seed in config.stages[stage].seeds}
    for stage, seed in sorted(needed):
        if (stop_by is not None and not stage_trained(stage_folder(config, stage, seed))
                and not finishes_in_time(typical_stage_seconds(config, stage), stop_by,
                                         f"stage {stage} seed {seed}")):
            continue
        build_stage(config, stage, seed, wait=False)


def _build_stage(config: ExperimentConfig, name: str, seed: int, folder: Path
                 ) -> tuple[Path, str]:
    """Train (or resume) the stage if this machine lacks it. A stage re-trained in a later
    session must come out with the weights its finished runs started from, unless
    ``retrained_stages: accept`` (then it is another realization of the stage)."""
    from mtdnn.trainer import train

    record = stage_record(config, name, seed)
    keys = stage_train_keys(config, name)
    if not stage_trained(folder):
        log.info("stage %s seed %d", name, seed)
        train(config_from_dict({**stage_run_keys(config, name), "seed": seed,
                                "output_dir": str(folder),
                                **continue_keys(folder)}, source=f"stage {folder}"))
    fingerprint = weights_fingerprint(folder / "last")
    summary = read_json(folder / "summary.json")
    made = {"weights_fingerprint": fingerprint, "machine": summary.get("machine"),
            "metrics": summary["last"]["metrics"], "train_seconds": summary.get("train_seconds")}
    if record is None:
        record = {"stage": name, "seed": seed, "weights_fingerprint": fingerprint,
                  "train_keys": keys, "precision": summary.get("precision"),
                  "steps": summary["steps"], "metrics": summary["last"]["metrics"],
                  "machine": summary.get("machine"),
                  "train_seconds": summary.get("train_seconds")}
    elif fingerprint not in {r["weights_fingerprint"] for r in realizations(record)}:
        earlier = realizations(record)[-1]
        if config.retrained_stages == "error":
            raise MtdnnError(
                f"the re-trained stage '{name}' has weights {fingerprint[:12]} (made on "
                f"{describe(made['machine'])}), but its finished runs started from "
                f"{earlier['weights_fingerprint'][:12]} (made on "
                f"{describe(earlier.get('machine'))})", file=find_stage_record(config, name, seed),
                key="retrained_stages",
                allowed="the same stage; retrained_stages: accept to record it as another "
                        "realization (fp32 differs in its last bits between CPUs and thread "
                        "counts); or a new output_dir to start over")
        log.warning("stage %s seed %d: re-trained weights %s differ from %s (made on %s, now "
                    "%s): recorded as realization %d", name, seed, fingerprint[:12],
                    earlier["weights_fingerprint"][:12], describe(earlier.get("machine")),
                    describe(made["machine"]), len(realizations(record)) + 1)
        record = {**record, "weights_fingerprint": fingerprint,
                  "realizations": [*realizations(record), made]}
    if not (folder / RECORD).is_file() or read_json(folder / RECORD) != record:
        atomic_write_json(folder / RECORD, record)
    return folder / "last", fingerprint


def stage_trained(folder: Path) -> bool:
    """Whether a stage's folder holds its finished training (on this machine)."""
    return (folder / "summary.json").is_file() and (folder / "last").is_dir()


def describe(machine: dict[str, Any] | None) -> str:
    if not machine:
        return "an unrecorded machine"
    return (f"{machine.get('cpu')} ({machine.get('cpu_capability')}, "
            f"{machine.get('torch_threads')} threads)")


SMART_TERMS = ("adv_ratio", "delta_linf", "adv_grad_cos", "bregman_ratio")


def logged_evaluations(run_dir: Path) -> list[dict[str, Any]]:
    """Every dev evaluation of a run (step, epoch, metrics): the learning curve, kept in the
    record so that a published record shows whether the run had converged."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [{"step": e["step"], "epoch": e["epoch"], "metrics": e["metrics"]}
            for e in entries if e.get("kind") == "eval"]


def logged_smart_terms(run_dir: Path) -> dict[str, dict[str, float]]:
    """Median and maximum over a run's log lines of each SMART term it logged: the
    evidence that a regulariser was active, and how strong it was next to the task loss."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return {}
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    found = {}
    for name in SMART_TERMS:
        found_values = [e[name] for e in entries if e.get("kind") == "train" and name in e]
        if found_values:
            found[name] = {"median": float(np.median(found_values)),
                           "max": float(np.max(found_values))}
    return found


def run_keys(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
             init: Path | None, folder: Path) -> dict[str, Any]:
    keys = merged(config.train, config.arms[cell.arm].train)
    if cell.task != MULTITASK:
        keys["tasks"] = {cell.task: {"train": entry["file"],
                                     "dev": task_file(config, cell.task, "dev")}}
    # the experiment's data_dir, unless the training keys name their own
    return {**keys, "data_dir": keys.get("data_dir", config.data_dir), "seed": cell.seed,
            "output_dir": str(folder),
            "init_checkpoint": None if init is None else str(init), **continue_keys(folder)}


def run_cell(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
             init: Path | None, fingerprint: str | None) -> dict[str, Any]:
    """Train one run (resuming it if it was interrupted); write its record."""
    folder = Path(config.output_dir) / cell.folder
    keys = run_keys(config, cell, entry, init, folder)
    started = time.perf_counter()
    if config.arms[cell.arm].backend == "hf_trainer":
        from mtdnn.hf_trainer import run_config

        keys = {k: v for k, v in keys.items() if k not in ("resume", "overwrite")}
        summary = run_config(config_from_dict(keys, source=f"run {folder}"), folder)
    else:
        from mtdnn.trainer import train

        summary = train(config_from_dict(keys, source=f"run {folder}"))
    record = {"arm": cell.arm, "task": cell.task, "subset": cell.subset,
              "train_size": entry["size"], "seed": cell.seed,
              **({"stage_seed": cell.stage_seed} if cell.stage_seed is not None else {}),
              "backend": config.arms[cell.arm].backend, "start_fingerprint": fingerprint,
              "train_keys": arm_train_keys(config, cell.arm),
              "train_file": entry["file"] if cell.task != MULTITASK else None,
              "dev_file": task_file(config, cell.task, "dev") if cell.task != MULTITASK
              else None, "precision": summary["precision"], "steps": summary["steps"],
              "metrics": summary["last"]["metrics"], "evaluations": logged_evaluations(folder),
              "smart_terms": logged_smart_terms(folder),
              "train_examples_per_s": summary["train_examples_per_s"],
              "train_seconds": summary.get("train_seconds"),
              "resumed_from_step": summary.get("resumed_from_step", 0),
              "machine": summary.get("machine"),
              "wall_seconds": round(time.perf_counter() - started, 1)}
    if agreement_applies(config, cell):
        record["agreement"] = agreement_breakdown(config, cell, folder, summary["precision"])
    atomic_write_json(folder / RECORD, record)
    if config.finished_runs_keep == "model":
        keep_model_only(folder)
    return record


def agreement_applies(config: ExperimentConfig, cell: Cell) -> bool:
    spec = config.agreement.get(cell.task)
    return (spec is not None and config.arms[cell.arm].backend == "mtdnn"
            and (spec.subsets is None or cell.subset in spec.subsets))


def agreement_breakdown(config: ExperimentConfig, cell: Cell, folder: Path,
                        precision: str) -> dict[str, Any]:
    """The Figure 2 breakdown of the run's final model (``folder/last``)."""
    from mtdnn.agreement import model_breakdown
    from mtdnn.predictor import Predictor

    spec = config.agreement[cell.task]
    return model_breakdown(Predictor(folder / "last", precision=precision), cell.task,
                           [Path(f) for f in spec.rows], Path(spec.chaosnli))


def rescore_agreement(config: ExperimentConfig,
                      sizes: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Recompute the breakdown of every finished run in ``output_dir`` that lacks one of its
    measures (e.g. one added since) and whose final model is still there; the rest of each
    record stays as it was. An interrupted rescoring resumes where it stopped."""
    from mtdnn.agreement import DECIMALS, LEVELS

    rescored = missing = current = 0
    for cell in cells(config, sizes):
        folder = Path(config.output_dir) / cell.folder
        if not agreement_applies(config, cell) or not (folder / RECORD).is_file():
            continue
        record = read_record(folder / RECORD)
        if all(set(DECIMALS) <= set(record.get("agreement", {}).get(level, {}))
               for level in LEVELS):
            current += 1
            continue
        if not (folder / "last").is_dir():
            missing += 1
            continue
        record["agreement"] = agreement_breakdown(config, cell, folder, record["precision"])
        atomic_write_json(folder / RECORD, record)
        rescored += 1
    log.info("rescored the agreement breakdown of %d runs; %d already had every measure; "
             "%d runs no longer have their final model and keep their old breakdown",
             rescored, current, missing)


def all_sizes(config: ExperimentConfig) -> dict[str, dict[str, dict[str, Any]]]:
    return {task: subset_sizes(config, task) for task in grid_tasks(config)}


def run_experiment(config: ExperimentConfig, stop_by: datetime | None = None) -> Path:
    """Run every missing run, then write the results files; returns the results folder.
    Every finished run is checked before anything is written. With ``stop_by``, a run not
    expected to finish by then is left for later (:func:`fits_before`)."""
    sizes = all_sizes(config)
    prints = start_fingerprints(config, running=True)
    allowed = allowed_fingerprints(config, prints)
    todo, finished_here = [], []
    for cell in cells(config, sizes):
        path = find_record(config, cell.folder)
        if path is None:
            todo.append(cell)
        else:
            check_record(config, cell, read_record(path), path,
                         allowed.get((cell.arm, cell.stage_seed)))
            if path.is_relative_to(config.output_dir):
                finished_here.append(path.parent)
    if config.finished_runs_keep == "model":
        freed = sum(keep_model_only(folder) for folder in finished_here)
        if freed:
            log.info("finished_runs_keep: model: %.1f GB of resumable state and best "
                     "checkpoints deleted from finished runs", freed / 1e9)
    out = make_output_dir(Path(config.output_dir))
    atomic_write_json(out / "experiment_config.json", to_dict(config))
    # A run whose stage another worker is training waits until every other run has been
    # tried, so that meanwhile this worker trains another stage or runs that need none.
    waiting = [cell for cell in todo if not try_cell(config, cell, sizes, prints, stop_by,
                                                     wait=False)]
    for cell in waiting:
        try_cell(config, cell, sizes, prints, stop_by, wait=True)
    write_report(config, sizes)
    return out


def try_cell(config: ExperimentConfig, cell: Cell, sizes: dict[str, dict[str, dict[str, Any]]],
             prints: dict[tuple[str, int | None], str | None], stop_by: datetime | None,
             wait: bool) -> bool:
    """Run (or reuse, or leave to its worker or for later) one missing run. False: its stage
    is being trained by another worker and ``wait`` is off, so it is still to do."""
    folder, entry = Path(config.output_dir) / cell.folder, sizes[cell.task][cell.subset]
    with claimed(folder) as mine:
        # another worker on the same grid runs it (or finished it meanwhile)
        if not mine or (folder / RECORD).is_file():
            return True
        stage = stage_of(config, cell.arm)
        init = None if config.arms[cell.arm].init is None else Path(config.arms[cell.arm].init)
        key = (cell.arm, cell.stage_seed)
        # a stage's start weights are known only once it is trained, and reuse needs them
        stage_first = stage is not None and key not in prints
        # --stop-by weighs what this worker would train: not a run another worker holds,
        # nor one copied in from reuse_from (which takes no time)
        if stage_first and stop_by is not None and not fits_before(config, cell, entry, stop_by):
            return True
        if stage_first and (init := stage_start(config, stage, cell, wait, prints)) is None:
            return False
        source = reusable_record(config, cell, entry, prints[key])
        if source is not None:
            reuse(config, cell, source)
            return True
        if not stage_first:
            if stop_by is not None and not fits_before(config, cell, entry, stop_by):
                return True
            # a stage trained in an earlier run (or re-trained, if its weights are gone)
            if stage is not None and (
                    init := stage_start(config, stage, cell, wait, prints)) is None:
                return False
        log.info("run %s", cell)
        run_cell(config, cell, entry, init, prints[key])
    return True


def stage_start(config: ExperimentConfig, stage: str, cell: Cell, wait: bool,
                prints: dict[tuple[str, int | None], str | None]) -> Path | None:
    """The trained weights of ``cell``'s stage (trained here first if need be), with their
    fingerprint put in ``prints``; None while another worker trains it and ``wait`` is off."""
    built = build_stage(config, stage, cell.stage_seed, wait)
    if built is None:
        return None
    init, prints[(cell.arm, cell.stage_seed)] = built
    return init


# --- results -----------------------------------------------------------------------

def collect(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]]
            ) -> list[dict[str, Any]]:
    """The finished runs' records; one trained with other training keys is an error."""
    allowed = allowed_fingerprints(config, start_fingerprints(config, running=False))
    records = []
    for cell in sorted(cells(config, sizes), key=lambda c: list(config.arms).index(c.arm)):
        path = find_record(config, cell.folder)
        if path is not None:
            records.append(read_record(path))
            check_record(config, cell, records[-1], path,
                         allowed.get((cell.arm, cell.stage_seed)))
    return records


def read_record(path: Path) -> dict[str, Any]:
    """A run's record; one in an older runner's format is named, with its migration."""
    record = read_json(path)
    metrics = record.get("metrics") if isinstance(record, dict) else None
    if "arm" not in record or not isinstance(metrics, dict) or not all(
            isinstance(m, dict) for m in metrics.values()):
        raise MtdnnError("a result record in an older format (metrics not keyed by task, or "
                         "no arm)", file=path,
                         allowed="records of python -m mtdnn.experiment; migrate older ones "
                                 "with python scripts/migrate_records.py")
    return record


def stage_rows(config: ExperimentConfig) -> dict[str, dict[str, dict[str, float]]]:
    """Each stage seed's own dev metrics (before any fine-tuning), for the tasks table."""
    rows = {}
    for name, stage in config.stages.items():
        for seed in stage.seeds:
            record = stage_record(config, name, seed)
            if record is not None:
                count = len(realizations(record))
                label = "no fine-tuning" + (f"; {count} realizations" if count > 1 else "")
                rows[f"stage {name} seed {seed} ({label})"] = record["metrics"]
    return rows


def write_report(config: ExperimentConfig,
                 sizes: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    from mtdnn.plots import plot_arms, plot_subsets

    out = Path(config.output_dir)
    records = collect(config, sizes)
    arms = list(config.arms)
    report.write_csv(records, out / "results.csv")
    if config.layout == "subsets":
        tasks = list(grid_tasks(config))
        table = report.subsets_table(
            tasks, {t: list(task_subsets(config, t)) for t in tasks},
            isinstance(config.subsets, dict), sizes, arms, records, config.baseline,
            {arm: set(spec.tasks or tasks) for arm, spec in config.arms.items()})
        plot_subsets(records, tasks, arms, out / "results.png")
        columns = {f"{t} {s}": (t, "accuracy", s) for t in tasks for s in task_subsets(config, t)}
    else:
        table = report.tasks_table(arms, records, stage_rows(config), list(config.tasks),
                                   config.baseline)
        table += report.learning_curve_table(arms, records, list(config.tasks))
        found = report.task_columns(records, list(config.tasks))
        columns = {f"{t} {m}": (t, m, None) for t, m in found}
        plot_arms(records, found, arms, out / "results.png")
    pairs = report.arm_pairs(arms, config.baseline)
    table += report.paired_table(pairs, columns, records)
    table += report.sign_pattern_table(config.paper, pairs, columns, records)
    for task in config.agreement:
        reference = uniform_reference(config.agreement[task])  # the same for every subset
        for subset in task_subsets(config, task):
            table += agreement_section(records, task, subset, arms,
                                       out / f"agreement_{task}_{subset}.png", config.baseline,
                                       reference)
    atomic_write_text(out / "results.md", table)
    return records


def uniform_reference(spec: Agreement) -> dict[str, dict[str, float]]:
    from mtdnn.agreement import load_chaosnli, scored_rows, uniform_breakdown

    return uniform_breakdown(scored_rows([Path(f) for f in spec.rows]),
                             load_chaosnli(Path(spec.chaosnli)))


def agreement_section(records: list[dict[str, Any]], task: str, subset: str, arms: list[str],
                      plot_path: Path, baseline: str | None = None,
                      reference: dict[str, dict[str, float]] | None = None) -> str:
    """Each arm's breakdown over its runs of ``task`` on ``subset`` (Figure 2): mean ± std,
    its plot, and each arm's differences from ``baseline`` (else the first arm with runs)
    with Welch's p; ``reference`` (a uniform prediction's breakdown) is shown as a last row,
    outside the comparisons."""
    from mtdnn import agreement

    runs = {arm: found for arm in arms if (found := {
        report.run_key(r): r["agreement"] for r in records
        if r["arm"] == arm and r["task"] == task and r["subset"] == subset
        and r.get("agreement")})}
    if not runs:
        return ""

    def keyed(arm: str, level: str, measure: str) -> report.Keyed:
        return {run: np.nan if found[level].get(measure) is None else found[level][measure]
                for run, found in runs[arm].items()}

    def values(arm: str, level: str, measure: str) -> list[float]:
        return list(keyed(arm, level, measure).values())

    first = next(iter(next(iter(runs.values())).values()))
    names = {arm: f"{arm} (n={len(found)})" for arm, found in runs.items()}
    measures = list(agreement.DECIMALS)  # a record made before a measure existed shows "—"
    # the pair counts are the dev file's, the same in every run: kept as counts
    means = {names[arm]: {level: {"pairs": first[level]["pairs"], **{
        m: float(np.mean(values(arm, level, m))) for m in measures}} for level in first}
        for arm in runs}
    spread = {names[arm]: {level: {m: float(np.std(values(arm, level, m), ddof=1))
                                   if len(runs[arm]) > 1 else np.nan for m in measures}
                           for level in agreement.LEVELS} for arm in runs}
    if reference:
        means[agreement.REFERENCE] = reference
        spread[agreement.REFERENCE] = {level: {} for level in agreement.LEVELS}
    agreement.plot(means, plot_path, spread)
    text = (f"\n### {task} ({subset}): accuracy and KL(human ‖ model) by annotator "
            f"agreement\n\nMean ± std over each arm's runs; plot: {plot_path.name}.\n\n"
            + agreement.table(means, spread))
    base = baseline if baseline in runs else next(iter(runs))
    others = [arm for arm in runs if arm != base]
    if not others:
        return text
    heads = {"accuracy": "accuracy", "kl_100": "KL to 100", "kl_100_tempered": "KL at T"}
    columns = [("accuracy", level) for level in agreement.LEVELS] + [
        (m, level) for m in ("kl_100", "kl_100_tempered") for level in agreement.ANNOTATED]
    lines = report.table_head([f"{heads[m]} {level}" for m, level in columns], first="pair")

    def gap(arm: str, measure: str, level: str) -> str:
        ours, theirs = keyed(arm, level, measure), keyed(base, level, measure)
        if np.isnan([*ours.values(), *theirs.values()]).any():  # recorded before the measure
            return "—"
        return report.difference(ours, theirs, agreement.DECIMALS[measure])

    for arm in others:
        lines.append(f"| {arm} − {base} | " + " | ".join(
            gap(arm, m, level) for m, level in columns) + " |")
    return (text + f"\nDifferences from {base} (accuracy in points, KL in nats; "
            f"{report.WELCH_UNITS}; {len(others) * len(columns)} comparisons, not corrected "
            "for multiple comparisons):\n\n" + "\n".join(lines) + "\n")


RESULT_FILES = ("results.csv", "results.md", "results.png", "experiment_config.json")


def publish(config: ExperimentConfig) -> Path:
    """Copy the small files (records and tables, no checkpoints) into ``publish_dir``."""
    if not config.publish_dir:
        raise MtdnnError("no publish_dir to copy the results into", key="publish_dir",
                         allowed="a tracked folder, e.g. publish_dir: results/<experiment>")
    out, target = Path(config.output_dir), make_output_dir(Path(config.publish_dir),
                                                           key="publish_dir")
    copied = [(path, path.relative_to(out)) for path in sorted(out.rglob(RECORD))]
    copied += [(out / name, Path(name)) for name in RESULT_FILES if (out / name).is_file()]
    copied += [(path, Path(path.name)) for path in sorted(out.glob("agreement_*.png"))]
    if config.stage_dir:  # this experiment's stages, kept beside its runs
        copied += [(path, Path("stages") / path.relative_to(config.stage_dir))
                   for stage in config.stages
                   for seed in config.stages[stage].seeds
                   if (path := stage_folder(config, stage, seed) / RECORD).is_file()]
    for source, relative in copied:
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target / relative)
    log.info("published %d files to %s", len(copied), target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mtdnn.experiment", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="experiment YAML (experiments/*.yaml)")
    parser.add_argument("--report-only", action="store_true",
                        help="write the results files from the finished runs and print "
                             "what is left (runs, stages, worker-hours); train nothing")
    parser.add_argument("--publish", action="store_true",
                        help="copy the records and results files into publish_dir")
    parser.add_argument("--rescore-agreement", action="store_true",
                        help="recompute the agreement breakdown of the finished runs whose "
                             "final model is still in output_dir, then report as "
                             "--report-only does; trains nothing")
    parser.add_argument("--stages-only", action="store_true",
                        help="train the stages the arms start from, and nothing else")
    parser.add_argument("--stop-by", metavar="TIME",
                        help="start no run that is not expected to finish by TIME (HH:MM or "
                             "an ISO date-time), judged by the wall times of finished runs "
                             "like it; for sessions whose end takes the run folders with it")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override a config key, e.g. seeds=[13,14] train.epochs=2")
    add_debug_flag(parser)
    args = parser.parse_intermixed_args(argv)  # flags may sit among the overrides
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    config = load_experiment(args.config, args.overrides)
    stop_by = parse_stop_by(args.stop_by) if args.stop_by else None
    if args.stages_only:
        start_fingerprints(config, running=True)  # stage records checked before training
        build_stages(config, stop_by)
        if args.publish:
            publish(config)
        return
    if args.report_only or args.rescore_agreement:
        out = make_output_dir(Path(config.output_dir))
        sizes = all_sizes(config)
        if args.rescore_agreement:
            rescore_agreement(config, sizes)
        write_report(config, sizes)
    else:
        out = run_experiment(config, stop_by)
    if args.publish:
        publish(config)
    sizes = all_sizes(config)
    records, total = collect(config, sizes), len(cells(config, sizes))
    print((out / "results.md").read_text())
    print(f"{len(records)} of {total} runs finished; "
          f"results: {out / 'results.csv'}, {out / 'results.md'}, {out / 'results.png'}")
    print(work_left(config, sizes))


if __name__ == "__main__":
    run_cli(main)
