"""An experiment's YAML as typed dataclasses: its arms, stages, tasks and subsets,
validated at load, and the training keys each arm's and stage's runs get."""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mtdnn.config.compatibility import with_current_names
from mtdnn.config.resolve import (
    apply_override,
    config_file,
    load_mapping,
    merged,
    resolve_config,
)
from mtdnn.config.schema import build
from mtdnn.config.train_config import keys_marked
from mtdnn.errors import MtdnnError

FULL = "full"            # the subset that is a task's whole train file


MULTITASK = "multitask"  # the task of a run that trains train.tasks together


STAGE_PREFIX = "stage:"


# Keys that change how a run looks or how often it saves, not what it learns: a finished
# run stays valid (records written before a key was marked still compare equal). Marked
# on the key's field (``cosmetic=True``), as its help is.
COSMETIC_TRAIN_KEYS = keys_marked("cosmetic")
# What the hf_trainer backend reads (``hf_trainer=True`` on the field); any other training
# key would be silently ignored, so it is an error.
HF_TRAINER_KEYS = keys_marked("hf_trainer")


# Where a grid's jobs run (mtdnn.experiment.engines runs them).
def _at_least_one() -> dict:
    return {"check": (lambda v: v >= 1, "a whole number >= 1")}


@dataclass(frozen=True)
class SlurmResources:
    """What each Slurm job asks for (``submitit`` parameters)."""

    partition: str | None = None
    time_min: int = 240  # the job's time limit; a job cut off by it is requeued
    # none: the launcher's threads_per_job (--threads-per-job), else 4
    cpus_per_task: int | None = None
    gpus_per_node: int = 0
    mem_gb: int = 16
    # auto: Slurm where sbatch is found, else an error; local: local processes through
    # submitit's local executor (to try a Slurm grid on one machine)
    cluster: Literal["auto", "slurm", "local"] = "auto"
    extra: dict[str, Any] = field(default_factory=dict)  # other sbatch options, e.g. qos
    max_requeues: int = 3  # after a time limit or a pre-emption
    # how long before time_min the job is signalled (SIGUSR2) to stop and be requeued; it
    # resumes from its run's last checkpoint
    signal_delay_s: int = field(default=90, metadata={
        "check": (lambda v: v >= 0, "a whole number of seconds >= 0")})


@dataclass(frozen=True)
class RayResources:
    """What each Ray task asks for, and which cluster to join."""

    address: str | None = None  # e.g. "auto" or "ray://head:10001"; none: a local cluster
    num_cpus: float = 1
    num_gpus: float = 0
    memory_gb: float | None = None
    max_retries: int = 3  # retries of a task whose worker died


@dataclass(frozen=True)
class LauncherConfig:
    """Where jobs run (``launcher:`` in an experiment YAML; ``--launcher``, ``--jobs`` and
    ``--threads-per-job`` on the command line)."""

    kind: Literal["local", "slurm", "ray"] = "local"
    jobs: int = field(default=1, metadata=_at_least_one())  # local: jobs at once
    # torch threads of each job; none: the CPUs given to a job (local: the machine's CPUs
    # shared among the jobs; slurm: cpus_per_task; ray: num_cpus)
    threads_per_job: int | None = field(default=None, metadata=_at_least_one())
    # local and Slurm: retries of a job that died (its worker process killed, out of memory,
    # its node lost; a Slurm time limit or pre-emption is slurm.max_requeues); Ray:
    # ray.max_retries
    max_retries: int = field(default=3, metadata={"check": (lambda v: v >= 0,
                                                             "a whole number >= 0")})
    slurm: SlurmResources = SlurmResources()
    ray: RayResources = RayResources()

    def slurm_cpus(self) -> int:
        """The CPUs each Slurm job asks for: ``slurm.cpus_per_task``, else the threads each
        job is to use, else 4."""
        return self.slurm.cpus_per_task or self.threads_per_job or 4

    def threads(self) -> int:
        if self.threads_per_job:
            return self.threads_per_job
        if self.kind == "slurm":
            return self.slurm_cpus()
        if self.kind == "ray":
            return max(1, int(self.ray.num_cpus))
        return max(1, (os.cpu_count() or 1) // self.jobs)


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
    label distribution per annotator-agreement level (:mod:`mtdnn.analysis.agreement`)."""

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
    # "task subset" -> N: only the first N runs of each arm in that cell, seed-major (a
    # stage arm: its first fine-tuning seed on each stage seed), for a column too costly
    # for the full seed protocol, e.g. {scitail 100pct: 3}
    max_runs_per_cell: dict[str, int] = field(default_factory=dict)
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
    # A stage re-trained later on another CPU (or with another thread count) comes out with
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
    # what the runs are scored on, as the tables name it: the dev sets, or tuning splits
    # carved from train (task_files' dev: a holdout), which are not the reported dev sets
    scored_on: Literal["dev", "tuning"] = "dev"
    # the arm every other is compared with (Welch's p); none: every pair of arms
    baseline: str | None = None
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig keys for every run
    # where the jobs run: local processes (default), Slurm through submitit, or Ray
    # (mtdnn.experiment.engines); the command line's --launcher/--jobs override it
    launcher: LauncherConfig = LauncherConfig()


def without_cosmetic(keys: dict[str, Any]) -> dict[str, Any]:
    """Training keys as runs are compared: cosmetic ones dropped, renamed values under
    their current names (a record of an older run matches a config written today)."""
    keys = with_current_names(keys, warn=False)
    return {k: v for k, v in sorted(keys.items()) if k not in COSMETIC_TRAIN_KEYS}


def flat(keys: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in keys.items():
        if isinstance(value, dict) and key != "tasks":
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_experiment(path: str | Path | None, overrides: list[str]) -> ExperimentConfig:
    """Load the experiment YAML with ``key=value`` overrides; every arm's and stage's
    training keys are validated now, not in the tenth run."""
    path = config_file(path, kind="experiment") if path is not None else None
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
    check_seeds_and_folders(config, path)
    check_runs_per_cell(config, path)
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
        resolve_config(stage_run_keys(config, name), origin=f"{source} (stages.{name})")
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
        resolve_config(keys, origin=f"{source} (train + arms.{name}.train)",
                       tasks_later=True)
        if arm.backend == "hf_trainer":
            check_hf_keys(keys, name, path, arm)
    return config


def check_seeds_and_folders(config: ExperimentConfig, path: str | Path | None) -> None:
    """Seeds to run, and a publish folder apart from the working one."""
    if not config.seeds:
        raise MtdnnError("the seed list is empty: nothing would run", file=path, key="seeds",
                         allowed="one seed or more, e.g. seeds: [13, 14, 15]")
    for name, arm in config.arms.items():
        if arm.seeds is not None and not arm.seeds:
            raise MtdnnError(f"arm '{name}' has an empty seed list", file=path,
                             key=f"arms.{name}.seeds",
                             allowed="one seed or more, or no key (the experiment's seeds)")
    for name, stage in config.stages.items():
        if not stage.seeds:
            raise MtdnnError(f"stage '{name}' has no seeds: the arms that start from it "
                             "could not run", file=path, key=f"stages.{name}.seeds",
                             allowed="one seed or more, e.g. seeds: [13]")
    if config.publish_dir is not None and \
            Path(config.publish_dir).resolve() == Path(config.output_dir).resolve():
        raise MtdnnError("publish_dir is output_dir: publishing would copy the runs onto "
                         "themselves", file=path, key="publish_dir",
                         allowed="a tracked folder apart from output_dir, e.g. results/<name>")


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
    from mtdnn.tasks.task_def import load_task_defs

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


def check_runs_per_cell(config: ExperimentConfig, path: str | Path | None) -> None:
    """``max_runs_per_cell`` names cells of the grid, each with at least one run."""
    allowed = [f"{t} {s}" for t in config.tasks or (MULTITASK,) for s in task_subsets(config, t)]
    for label, count in config.max_runs_per_cell.items():
        if label not in allowed:
            raise MtdnnError(f"max_runs_per_cell names cell '{label}', which the grid does "
                             "not have", file=path, key=f"max_runs_per_cell.{label}",
                             allowed=", ".join(allowed))
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise MtdnnError(f"found {count!r}: a cell needs at least one run", file=path,
                             key=f"max_runs_per_cell.{label}", allowed="an integer >= 1")


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
    base = load_mapping(stage.config, packaged=True) if stage.config else {}
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
