"""An experiment's results files from its records: the tables, the plots, each analysis's
section (:mod:`mtdnn.experiment.analyses`), and their copy into the tracked ``publish_dir``."""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtdnn.analysis import selection, smart_tables, tables
from mtdnn.errors import MtdnnError
from mtdnn.experiment.analyses import RunAnalysis
from mtdnn.experiment.config import MULTITASK, ExperimentConfig, task_subsets
from mtdnn.experiment.grid import cells, grid_tasks
from mtdnn.experiment.records import (
    RECORD,
    collect,
    input_status,
    realizations,
    stage_folder,
    stage_record,
    stale_runs_paragraph,
)
from mtdnn.files import atomic_write_text, make_output_dir

log = logging.getLogger(__name__)


def stage_records(config: ExperimentConfig) -> dict[str, list[dict[str, Any]]]:
    """Each stage's records, one per stage seed that has one."""
    return {name: [record for seed in stage.seeds
                   if (record := stage_record(config, name, seed)) is not None]
            for name, stage in config.stages.items()}


def stage_rows(stages: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Each stage seed's own dev metrics (before any fine-tuning), for the tasks table."""
    rows = {}
    for name, found in stages.items():
        for record in found:
            count = len(realizations(record))
            label = "no fine-tuning" + (f"; {count} realizations" if count > 1 else "")
            rows[f"stage {name} seed {record['seed']} ({label})"] = record["metrics"]
    return rows


def grid_progress(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]],
                  records: list[dict[str, Any]]) -> str:
    """A paragraph that says a table is of part of its grid, and which arms have fewer runs
    than planned (empty once every run is in): a mean over 3 of 5 seeds reads like one over 5."""
    planned = Counter(cell.arm for cell in cells(config, sizes))
    done = Counter(record["arm"] for record in records)
    short = [f"{arm} {done[arm]} of {count}" for arm, count in planned.items()
             if done[arm] < count]
    if not short:
        return ""
    return (f"**Part of the grid:** {len(records)} of {sum(planned.values())} runs are in; arms "
            f"with fewer runs than planned: {', '.join(short)}. Their rows, differences and "
            "tests are over the runs that are in.\n\n")


def write_report(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]],
                 analyses: Sequence[RunAnalysis] = ()) -> list[dict[str, Any]]:
    from mtdnn.analysis.plots import plot_arms, plot_subsets

    out = Path(config.output_dir)
    records = collect(config, sizes)
    stages = stage_records(config)
    arms = list(config.arms)
    # a run of train.tasks together recorded no size before its size was counted
    tables.write_csv([{**r, "train_size": sizes[r["task"]][r["subset"]]["size"]}
                      if r["task"] == MULTITASK and not r.get("train_size") else r
                      for r in records], out / "results.csv")
    if config.layout == "subsets":
        tasks = list(grid_tasks(config))
        table = tables.subsets_table(
            tasks, {t: list(task_subsets(config, t)) for t in tasks},
            isinstance(config.subsets, dict), sizes, arms, records, config.baseline,
            {arm: set(spec.tasks or tasks) for arm, spec in config.arms.items()},
            config.scored_on)
        plot_subsets(records, tasks, arms, out / "results.png")
        columns = {f"{t} {s}": (t, "accuracy", s) for t in tasks for s in task_subsets(config, t)}
    else:
        table = tables.tasks_table(arms, records, stage_rows(stages), list(config.tasks),
                                   config.baseline)
        table += tables.learning_curve_table(arms, records, list(config.tasks))
        found = selection.task_columns(records, list(config.tasks))
        columns = {f"{t} {m}": (t, m, None) for t, m in found}
        plot_arms(records, found, arms, out / "results.png")
    status = input_status(config, sizes)
    log.info(status.summary())
    table = grid_progress(config, sizes, records) + stale_runs_paragraph(config, status) + table
    table += smart_tables.stage_terms_table(stages)
    pairs = tables.arm_pairs(arms, config.baseline)
    table += tables.paired_table(pairs, columns, records)
    table += tables.sign_pattern_table(config.paper, pairs, columns, records)
    for analysis in analyses:
        table += analysis.report(config, records, out)
    atomic_write_text(out / "results.md", table)
    return records


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
