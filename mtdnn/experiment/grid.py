"""The grid of an experiment: one run per arm, task, available subset, seed and stage seed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtdnn.config.resolve import merged
from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import FULL, MULTITASK, ExperimentConfig, stage_of, task_subsets
from mtdnn.files import read_json


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


def task_file(config: ExperimentConfig, task: str, split: str) -> str:
    return (config.task_files.get(task, {}).get(split)
            or str(Path(config.data_dir) / task / f"{split}.jsonl"))


def cell_keys(config: ExperimentConfig, cell: Cell, entry: dict[str, Any]) -> dict[str, Any]:
    """The training keys of ``cell``'s run (``entry``: its subset's file), before the run
    folder and start weights are added: the experiment's and the arm's keys, the task's
    train and dev files, the data folder and the seed."""
    keys = merged(config.train, config.arms[cell.arm].train)
    if cell.task != MULTITASK:
        keys["tasks"] = {cell.task: {"train": entry["file"],
                                     "dev": task_file(config, cell.task, "dev")}}
    # the experiment's data_dir, unless the training keys name their own
    return {**keys, "data_dir": keys.get("data_dir", config.data_dir), "seed": cell.seed}


def subset_sizes(config: ExperimentConfig, task: str) -> dict[str, dict[str, Any]]:
    """Each subset of ``task``: its train file, size, and whether it runs."""
    entries = {}
    drawn = [s for s in task_subsets(config, task) if s != FULL]
    manifest = subset_manifest(config, task, drawn) if drawn else {}
    for name in task_subsets(config, task):
        if name == FULL and task == MULTITASK:  # train.tasks together: the sum of their files
            entries[name] = {"file": None, "size": multitask_size(config), "available": True}
        elif name == FULL:
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


def multitask_size(config: ExperimentConfig) -> int:
    """The training examples of a run that trains ``train.tasks`` together: the rows of
    each task's train file (its own, or ``<data_dir>/<task>/train.jsonl``)."""
    tasks = config.train.get("tasks") or {}
    specs = tasks if isinstance(tasks, dict) else {name: {} for name in tasks}
    data_dir = Path(config.train.get("data_dir", config.data_dir))
    total = 0
    for name, spec in specs.items():
        train = (spec or {}).get("train")
        total += line_count(Path(train) if isinstance(train, str)
                            else data_dir / name / "train.jsonl")
    return total


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
                         allowed=f"python -m mtdnn.data_prep subsets --data-dir {config.data_dir} "
                                 f"--task {task} --preset paper --seed {config.subset_seed}")
    manifest = read_json(path)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise MtdnnError("the manifest has no 'files' mapping", file=path,
                         allowed="a manifest written by python -m mtdnn.data_prep subsets")
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
        for task in grid_tasks(config):
            if spec.tasks is not None and task not in spec.tasks:
                continue
            for subset in task_subsets(config, task):
                if not sizes[task][subset]["available"]:
                    continue
                seeds = run_seeds(config, arm)
                cap = config.max_runs_per_cell.get(f"{task} {subset}")
                out += [Cell(arm, task, subset, seed, stage_seed)
                        for seed, stage_seed in seeds[:cap]]
    return sorted(out, key=lambda c: (c.seed, c.stage_seed or 0, list(config.arms).index(c.arm)))


def run_seeds(config: ExperimentConfig, arm: str) -> list[tuple[int, int | None]]:
    """The (seed, stage seed) of each run of ``arm`` in one task and subset: its seeds, each
    from every seed of its stage (stage seed None for an arm that starts from no stage),
    seed-major, so that the first N vary the stage seed first."""
    stage = stage_of(config, arm)
    stage_seeds = config.stages[stage].seeds if stage else (None,)
    return [(seed, stage_seed) for seed in config.arms[arm].seeds or config.seeds
            for stage_seed in stage_seeds]


def all_sizes(config: ExperimentConfig) -> dict[str, dict[str, dict[str, Any]]]:
    return {task: subset_sizes(config, task) for task in grid_tasks(config)}
