"""A grid's units of work, for any engine (:mod:`mtdnn.experiment.engines`) to run.

A **stage job** trains one seed of a multi-task stage, resuming from its ``last``. A
**cell job** fine-tunes one (arm, task, subset, seed, stage seed), resuming from its own
``last``, and writes its ``result.json``; it runs after its stage seed's job. Finished
cells (a ``result.json`` in ``output_dir`` or ``publish_dir``) and stages whose weights are
here need no job. :func:`run_job` is importable and takes picklable arguments, so a
process pool, Slurm or Ray can call it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtdnn.config.resolve import resolve_config
from mtdnn.data.sources import input_fingerprints
from mtdnn.errors import MtdnnError
from mtdnn.experiment.analyses import RunAnalysis
from mtdnn.experiment.config import MULTITASK, ExperimentConfig, arm_train_keys, stage_of
from mtdnn.experiment.engines import Job, Outcome, run_jobs
from mtdnn.experiment.grid import Cell, all_sizes, cell_keys, cells, task_file
from mtdnn.experiment.records import (
    RECORD,
    find_record,
    read_record,
    reusable_record,
    reuse,
    stage_folder,
    stage_record,
    stage_trained,
    start_fingerprints,
    what_ran,
    write_record,
)
from mtdnn.runs.run_dir import RunDir
from mtdnn.tasks.task_def import select_tasks

log = logging.getLogger(__name__)


def plan(config: ExperimentConfig, stages_only: bool = False,
         arms: tuple[str, ...] | None = None,
         analyses: Sequence[RunAnalysis] = (),
         stage_seeds: tuple[int, ...] | None = None) -> list[Job]:
    """The jobs ``config``'s grid still needs, stage jobs first (only those with
    ``stages_only``); a cell job names its stage job as ``after``. A stage is trained only
    for runs still to make: once they are all finished, its weights are not needed again.
    ``arms``: only these arms' runs (and their stages); ``stage_seeds``: only the runs that
    start from these stage seeds (a filter on the grid's runs: the grid, and so which runs
    a ``max_runs_per_cell`` cap keeps, stays the config's). ``analyses``: what each cell job
    measures of its run's final model."""
    stages: dict[tuple[str, int], Job | None] = {}
    jobs: list[Job] = []

    def stage_job(stage: str, seed: int) -> Job | None:
        if (stage, seed) not in stages:
            trained = stage_trained(stage_folder(config, stage, seed))
            stages[(stage, seed)] = None if trained else Job(
                f"stage {stage} seed {seed}", (config, ("stage", stage, seed), ()))
        return stages[(stage, seed)]

    for cell in cells(config, all_sizes(config)):
        wanted = (arms is None or cell.arm in arms) and (
            stage_seeds is None or cell.stage_seed in stage_seeds)
        if not wanted or find_record(config, cell.folder) is not None:
            continue
        stage = stage_of(config, cell.arm)
        after = stage_job(stage, cell.stage_seed) if stage is not None else None
        if not stages_only:
            jobs.append(Job(describe(cell), (config, ("cell", cell), tuple(analyses)), after))
    return [job for job in stages.values() if job is not None] + jobs


def describe(cell: Cell) -> str:
    return f"{cell.arm} {cell.task} {cell.subset} seed {cell.seed}" + (
        f" stage seed {cell.stage_seed}" if cell.stage_seed is not None else "")


def launch(config: ExperimentConfig, jobs: list[Job]) -> list[Outcome]:
    """Run ``jobs`` on ``config.launcher``'s engine, logging each as it ends."""
    log.info("%d job(s) to run on the %s launcher", len(jobs), config.launcher.kind)
    ended = []

    def report(outcome: Outcome) -> None:
        ended.append(outcome)
        log.info("[%d/%d] %s: %s", len(ended), len(jobs), outcome.job.name,
                 "done" if outcome.ok else f"FAILED: {outcome.error}")

    return run_jobs(run_job, jobs, config.launcher, Path(config.output_dir) / "slurm", report)


def work_left(config: ExperimentConfig) -> str:
    """How many runs and stage seeds the grid still needs (``--report-only``)."""
    jobs = plan(config)
    stages = sum(job.args[1][0] == "stage" for job in jobs)
    if not jobs:
        return "nothing left to run"
    runs = len(jobs) - stages
    return (f"left: {runs} run{'s' * (runs != 1)} and {stages} "
            f"stage{'s' * (stages != 1)} to train")


def run_job(config: ExperimentConfig, what: tuple, analyses: Sequence[RunAnalysis] = (),
            after: Any = None,
            threads: int | None = None) -> dict[str, Any] | None:
    """Run one job to its end (resuming it if it was interrupted); returns its record.
    ``what``: ``("stage", name, seed)`` or ``("cell", cell)``. ``after``: the result of
    the job it waited for (unread: engines pass it to order the two). ``threads`` caps
    this job's torch threads (several jobs share a machine)."""
    if not logging.getLogger().handlers:  # a worker process of an engine: log its run
        logging.basicConfig(level=logging.INFO, datefmt="%H:%M:%S",
                            format="%(asctime)s %(levelname)s %(message)s")
    if threads:
        import torch

        torch.set_num_threads(threads)
    if what[0] == "stage":
        from mtdnn.experiment.stages import build_stage

        build_stage(config, what[1], what[2])
        return stage_record(config, what[1], what[2])
    return run_cell_job(config, what[1], analyses)


def run_cell_job(config: ExperimentConfig, cell: Cell,
                 analyses: Sequence[RunAnalysis] = ()) -> dict[str, Any]:
    """A cell: its record if finished, copied in if ``reuse_from`` holds it, else trained."""
    done = find_record(config, cell.folder)
    if done is not None:
        return read_record(done)
    entry = all_sizes(config)[cell.task][cell.subset]
    init, fingerprint = start_point(config, cell)
    source = reusable_record(config, cell, entry, fingerprint)
    if source is not None:
        reuse(config, cell, source)
        return read_record(Path(config.output_dir) / cell.folder / RECORD)
    log.info("run %s", cell)
    return run_cell(config, cell, entry, init, fingerprint, analyses)


def start_point(config: ExperimentConfig, cell: Cell) -> tuple[Path | None, str | None]:
    """The checkpoint a cell starts from and its weights' fingerprint; a stage's weights
    are checked against (and recorded in) the stage's record."""
    stage = stage_of(config, cell.arm)
    if stage is None:
        init = config.arms[cell.arm].init
        return (None if init is None else Path(init),
                start_fingerprints(config, running=True)[(cell.arm, None)])
    from mtdnn.experiment.stages import build_stage

    folder = stage_folder(config, stage, cell.stage_seed)
    if not stage_trained(folder):
        raise MtdnnError(f"stage {stage} seed {cell.stage_seed} is not trained here",
                         file=folder, allowed="run the grid again: its stage job trains it")
    return build_stage(config, stage, cell.stage_seed)


def run_keys(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
             init: Path | None, folder: Path) -> dict[str, Any]:
    from mtdnn.training.resume import continue_keys

    # a line every tenth of the run instead of a bar (jobs running at once would draw over
    # each other)
    return {**cell_keys(config, cell, entry), "output_dir": str(folder), "progress_bar": False,
            "init_checkpoint": None if init is None else str(init), **continue_keys(folder)}


def run_cell(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
             init: Path | None, fingerprint: str | None,
             analyses: Sequence[RunAnalysis] = ()) -> dict[str, Any]:
    """Train one run (resuming it if it was interrupted); write its record."""
    from mtdnn.runs.checkpoint import keep_model_only

    folder = Path(config.output_dir) / cell.folder
    keys = run_keys(config, cell, entry, init, folder)
    started = time.perf_counter()
    hf_trainer = config.arms[cell.arm].backend == "hf_trainer"
    if hf_trainer:
        keys = {k: v for k, v in keys.items() if k not in ("resume", "overwrite")}
    resolved = resolve_config(keys, origin=f"run {folder}")
    inputs = input_fingerprints(resolved, select_tasks(resolved))  # as the run starts
    if hf_trainer:
        from mtdnn.training.hf_trainer import run_config

        summary = run_config(resolved, folder)
    else:
        from mtdnn.training.trainer import train

        summary = train(resolved)
    run = RunDir(folder)
    record = {"arm": cell.arm, "task": cell.task, "subset": cell.subset,
              "train_size": entry["size"], "seed": cell.seed,
              **({"stage_seed": cell.stage_seed} if cell.stage_seed is not None else {}),
              "backend": config.arms[cell.arm].backend, "start_fingerprint": fingerprint,
              "train_keys": arm_train_keys(config, cell.arm),
              "train_file": entry["file"] if cell.task != MULTITASK else None,
              "dev_file": task_file(config, cell.task, "dev") if cell.task != MULTITASK
              else None, "inputs": inputs, "precision": summary["precision"],
              "steps": summary["steps"],
              "metrics": summary["last"]["metrics"], "evaluations": run.evaluations(),
              **what_ran(run, summary, resolved.smart),
              "train_examples_per_s": summary["train_examples_per_s"],
              "train_seconds": summary.get("train_seconds"),
              "resumed_from_step": summary.get("resumed_from_step", 0),
              "wall_seconds": round(time.perf_counter() - started, 1)}
    for analysis in analyses:
        if analysis.applies(config, cell):
            record[analysis.name] = analysis.measure(config, cell, folder, summary["precision"])
    write_record(folder / RECORD, record)
    if config.finished_runs_keep == "model":
        keep_model_only(folder)
    return record
