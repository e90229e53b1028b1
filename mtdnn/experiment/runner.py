"""Running a grid: the runs checked, the missing ones handed to a launcher as jobs
(:mod:`mtdnn.experiment.jobs`), then the results files."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from mtdnn.config.schema import to_dict
from mtdnn.errors import MtdnnError
from mtdnn.experiment.analyses import RunAnalysis
from mtdnn.experiment.config import (
    MULTITASK,
    ExperimentConfig,
)
from mtdnn.experiment.engines import check_launcher
from mtdnn.experiment.grid import Cell, all_sizes, cells, task_file
from mtdnn.experiment.jobs import launch, plan
from mtdnn.experiment.records import (
    RECORD,
    InputStatus,
    allowed_fingerprints,
    check_record,
    find_record,
    input_status,
    read_record,
    start_fingerprints,
    write_record,
)
from mtdnn.experiment.results import write_report
from mtdnn.files import atomic_write_json, check_output_folder, make_output_dir

log = logging.getLogger(__name__)


def rescore(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]],
            analyses: Sequence[RunAnalysis]) -> None:
    """Measure again every finished run in ``output_dir`` whose record lacks one of an
    analysis's measures (e.g. one added since) and whose final model is still there; the
    rest of each record stays as it was. An interrupted rescoring resumes where it stopped."""
    for analysis in analyses:
        rescored = missing = current = 0
        for cell in cells(config, sizes):
            folder = Path(config.output_dir) / cell.folder
            if not analysis.applies(config, cell) or not (folder / RECORD).is_file():
                continue
            record = read_record(folder / RECORD)
            if analysis.complete(record.get(analysis.name)):
                current += 1
                continue
            if not (folder / "last").is_dir():
                missing += 1
                continue
            record[analysis.name] = analysis.measure(config, cell, folder, record["precision"])
            write_record(folder / RECORD, record)
            rescored += 1
        log.info("rescored the %s breakdown of %d runs; %d already had every measure; %d "
                 "runs no longer have their final model and keep their old breakdown",
                 analysis.name, rescored, current, missing)


ChangedInputs = Literal["refuse", "rerun", "keep"]


def run_experiment(config: ExperimentConfig, stages_only: bool = False,
                   arms: tuple[str, ...] | None = None,
                   changed: ChangedInputs = "refuse",
                   analyses: Sequence[RunAnalysis] = (),
                   stage_seeds: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
    """Run every job the grid still needs (of ``arms`` only, if given) on
    ``config.launcher``'s engine, then write the results files of every arm; returns the
    finished runs' records (the tables' rows). Every finished run is checked before
    anything is trained, its inputs too: a run whose data or task definition changed since
    it ran is an error (``changed="refuse"``), trained again (``"rerun"``: its old record
    set aside) or kept and marked stale in the tables (``"keep"``). A job that fails is
    reported with its error after the others have run, and the command then fails."""
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
    status = input_status(config, sizes)
    if status.changed:
        handle_changed_inputs(config, status, changed)
        finished_here = [folder for folder in finished_here if folder.is_dir()]
    if config.finished_runs_keep == "model":
        from mtdnn.runs.checkpoint import keep_model_only

        freed = sum(keep_model_only(folder) for folder in finished_here)
        if freed:
            log.info("finished_runs_keep: model: %.1f GB of resumable state and best "
                     "checkpoints deleted from finished runs", freed / 1e9)
    jobs = plan(config, stages_only, arms, analyses, stage_seeds)
    check_output_folder(Path(config.output_dir), "output_dir")
    if jobs:
        check_launcher(config.launcher)
    check_data_files(config, [job.args[1][1] for job in jobs if job.args[1][0] == "cell"],
                     sizes, analyses)
    out = make_output_dir(Path(config.output_dir))
    atomic_write_json(out / "experiment_config.json", to_dict(config))
    outcomes = launch(config, jobs) if jobs else []
    records = write_report(config, sizes, analyses)
    failed = [outcome for outcome in outcomes if not outcome.ok]
    if failed:
        raise MtdnnError(
            f"{len(failed)} of {len(outcomes)} jobs failed (the others finished and are in "
            "the results): " + "; ".join(f"{o.job.name}: {o.error}" for o in failed),
            file=config.output_dir, allowed="fix what the errors name and run the grid "
                                            "again: finished runs are kept, the rest resume")
    return records


def handle_changed_inputs(config: ExperimentConfig, status: InputStatus,
                          changed: ChangedInputs) -> None:
    """Refuse, re-run or keep the finished runs whose inputs changed since they ran."""
    names = sorted({name for found in status.changed.values() for name in found})
    runs = len(status.changed)
    if changed == "refuse":
        files = [name for name in names if not name.startswith("task definition")]
        raise MtdnnError(
            f"{runs} finished run{'s' * (runs != 1)} of this grid {'were' if runs != 1 else 'was'}"
            f" trained on inputs that have changed since: {', '.join(names)} (the first run: "
            f"{status.cells[next(iter(status.changed))].folder}); reusing "
            f"{'them' if runs != 1 else 'it'} would put numbers of data that no longer exist "
            "in the tables", file=files[0] if files else None,
            allowed="--rerun-changed to train exactly those runs again (their old records "
                    "are kept beside them as result-inputs-changed.json), or --keep-changed "
                    "to keep their results, marked stale in the tables")
    if changed == "keep":
        log.warning("keeping %d finished runs trained on inputs that have changed since (%s): "
                    "the tables mark them stale", runs, ", ".join(names))
        return
    for cell in status.cells.values():
        set_aside(config, cell)
    log.info("inputs changed (%s): %d finished runs set aside to train again", ", ".join(names),
             runs)


SET_ASIDE = "result-inputs-changed.json"


def set_aside(config: ExperimentConfig, cell: Cell) -> None:
    """Keep a stale run's records where no reader takes them for a finished run: its folder
    in ``output_dir`` moves whole to ``<folder>-inputs-changed`` (its checkpoints would
    resume), a published record is renamed in place."""
    here = Path(config.output_dir) / cell.folder
    if (here / RECORD).is_file():
        target = here.with_name(here.name + "-inputs-changed")
        if target.exists():
            shutil.rmtree(target)  # an earlier set-aside of the same run
        here.rename(target)
        (target / RECORD).rename(target / SET_ASIDE)
    published = Path(config.publish_dir) / cell.folder / RECORD if config.publish_dir else None
    if published is not None and published.is_file():
        published.rename(published.with_name(SET_ASIDE))


def check_data_files(config: ExperimentConfig, todo: list[Cell],
                     sizes: dict[str, dict[str, dict[str, Any]]],
                     analyses: Sequence[RunAnalysis] = ()) -> None:
    """Every file the runs to do will read exists, before any folder is made."""
    for analysis in analyses if todo else ():
        analysis.check_files(config)
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
                                                  "python -m mtdnn.data_prep), or set task_files")
