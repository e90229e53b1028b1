"""An experiment's results files from its records: the tables, the plots, the agreement
breakdowns, and their copy into the tracked ``publish_dir``."""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from mtdnn import tables
from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import Agreement, ExperimentConfig, task_subsets
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


def write_report(config: ExperimentConfig,
                 sizes: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    from mtdnn.plots import plot_arms, plot_subsets

    out = Path(config.output_dir)
    records = collect(config, sizes)
    stages = stage_records(config)
    arms = list(config.arms)
    tables.write_csv(records, out / "results.csv")
    if config.layout == "subsets":
        tasks = list(grid_tasks(config))
        table = tables.subsets_table(
            tasks, {t: list(task_subsets(config, t)) for t in tasks},
            isinstance(config.subsets, dict), sizes, arms, records, config.baseline,
            {arm: set(spec.tasks or tasks) for arm, spec in config.arms.items()})
        plot_subsets(records, tasks, arms, out / "results.png")
        columns = {f"{t} {s}": (t, "accuracy", s) for t in tasks for s in task_subsets(config, t)}
    else:
        table = tables.tasks_table(arms, records, stage_rows(stages), list(config.tasks),
                                   config.baseline)
        table += tables.learning_curve_table(arms, records, list(config.tasks))
        found = tables.task_columns(records, list(config.tasks))
        columns = {f"{t} {m}": (t, m, None) for t, m in found}
        plot_arms(records, found, arms, out / "results.png")
    status = input_status(config, sizes)
    log.info(status.summary())
    table = grid_progress(config, sizes, records) + stale_runs_paragraph(config, status) + table
    table += tables.stage_terms_table(stages)
    pairs = tables.arm_pairs(arms, config.baseline)
    table += tables.paired_table(pairs, columns, records)
    table += tables.sign_pattern_table(config.paper, pairs, columns, records)
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
        tables.run_key(r): r["agreement"] for r in records
        if r["arm"] == arm and r["task"] == task and r["subset"] == subset
        and r.get("agreement")})}
    if not runs:
        return ""

    def keyed(arm: str, level: str, measure: str) -> tables.Keyed:
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
    return text + agreement_differences(keyed, list(runs), base)


def agreement_differences(keyed: Any, arms: list[str], base: str) -> str:
    """Each arm's breakdown minus ``base``'s, with Welch's p; ``keyed(arm, level,
    measure)`` gives an arm's runs' values."""
    from mtdnn import agreement

    others = [arm for arm in arms if arm != base]
    if not others:
        return ""
    heads = {"accuracy": "accuracy", "kl_100": "KL to 100", "kl_100_tempered": "KL at T"}
    columns = [("accuracy", level) for level in agreement.LEVELS] + [
        (m, level) for m in ("kl_100", "kl_100_tempered") for level in agreement.ANNOTATED]
    lines = tables.table_head([f"{heads[m]} {level}" for m, level in columns], first="pair")

    def gap(arm: str, measure: str, level: str) -> str:
        ours, theirs = keyed(arm, level, measure), keyed(base, level, measure)
        if np.isnan([*ours.values(), *theirs.values()]).any():  # recorded before the measure
            return "—"
        return tables.difference(ours, theirs, agreement.DECIMALS[measure])

    for arm in others:
        lines.append(f"| {arm} − {base} | " + " | ".join(
            gap(arm, m, level) for m, level in columns) + " |")
    return (f"\nDifferences from {base} (accuracy in points, KL in nats; "
            f"{tables.WELCH_UNITS}; {len(others) * len(columns)} comparisons, not corrected "
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
