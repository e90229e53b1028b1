"""Running a grid: the runs checked, the missing ones handed to a launcher as jobs, each
trained (or reused) and recorded (:func:`run_cell`), then the results files."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from mtdnn._version import code_version
from mtdnn.checkpoint import continue_keys, keep_model_only
from mtdnn.config import config_from_dict, merged
from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import (
    MULTITASK,
    ExperimentConfig,
    arm_train_keys,
    check_agreement_files,
)
from mtdnn.experiment.grid import Cell, all_sizes, cells, task_file
from mtdnn.experiment.records import (
    RECORD,
    allowed_fingerprints,
    check_record,
    find_record,
    read_record,
    start_fingerprints,
)
from mtdnn.experiment.results import write_report
from mtdnn.files import atomic_write_json, check_output_folder, make_output_dir
from mtdnn.schema import to_dict

log = logging.getLogger(__name__)


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
        resolved = config_from_dict(keys, source=f"run {folder}")
        summary = run_config(resolved, folder)
    else:
        from mtdnn.trainer import train

        resolved = config_from_dict(keys, source=f"run {folder}")
        summary = train(resolved)
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
              # what ran, readable without the preset table of its day
              "smart_settings": to_dict(resolved.smart) if resolved.smart.enabled else None,
              "teacher_start_share": summary.get("teacher_start_share"),
              "dev_entropy": summary["last"].get("entropy"),
              "code_version": summary.get("code_version") or code_version(),
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


def run_experiment(config: ExperimentConfig, stages_only: bool = False
                   ) -> list[dict[str, Any]]:
    """Run every job the grid still needs on ``config.launcher``'s engine, then write the
    results files; returns the finished runs' records (the tables' rows). Every finished
    run is checked before anything is trained; a job that fails is reported with its
    error after the others have run, and the command then fails."""
    from mtdnn.experiment.jobs import launch, plan

    sizes = all_sizes(config)
    allowed = allowed_fingerprints(config, start_fingerprints(config, running=True))
    finished_here = []
    for cell in cells(config, sizes):
        path = find_record(config, cell.folder)
        if path is not None:
            check_record(config, cell, read_record(path), path,
                         allowed.get((cell.arm, cell.stage_seed)))
            if path.is_relative_to(config.output_dir):
                finished_here.append(path.parent)
    if config.finished_runs_keep == "model":
        freed = sum(keep_model_only(folder) for folder in finished_here)
        if freed:
            log.info("finished_runs_keep: model: %.1f GB of resumable state and best "
                     "checkpoints deleted from finished runs", freed / 1e9)
    jobs = plan(config, stages_only)
    check_output_folder(Path(config.output_dir), "output_dir")
    check_data_files(config, [job.args[1][1] for job in jobs if job.args[1][0] == "cell"],
                     sizes)
    out = make_output_dir(Path(config.output_dir))
    atomic_write_json(out / "experiment_config.json", to_dict(config))
    outcomes = launch(config, jobs) if jobs else []
    records = write_report(config, sizes)
    failed = [outcome for outcome in outcomes if not outcome.ok]
    if failed:
        raise MtdnnError(
            f"{len(failed)} of {len(outcomes)} jobs failed (the others finished and are in "
            "the results): " + "; ".join(f"{o.job.name}: {o.error}" for o in failed),
            file=config.output_dir, allowed="fix what the errors name and run the grid "
                                            "again: finished runs are kept, the rest resume")
    return records


def check_data_files(config: ExperimentConfig, todo: list[Cell],
                     sizes: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Every file the runs to do will read exists, before any folder is made."""
    if todo:
        check_agreement_files(config)
    for cell in todo:
        if cell.task == MULTITASK:
            continue
        for split, file in (("train", sizes[cell.task][cell.subset]["file"]),
                            ("dev", task_file(config, cell.task, "dev"))):
            if not Path(file).is_file():
                key = f"task_files.{cell.task}.{split}" if split in config.task_files.get(
                    cell.task, {}) else "data_dir"
                raise MtdnnError(f"task '{cell.task}': {split} file not found", file=file,
                                 key=key, allowed="an existing file: run `make data` (or "
                                                  "python -m data_prep), or set task_files")
