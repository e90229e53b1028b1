"""Results tables of an experiment, in the papers' layouts, from its run records.

Two layouts (``layout:`` in an experiment config):

- ``subsets`` — Table 5 of the SMART paper: one block per task, a row of training-set
  sizes, then one row per arm with dev accuracy mean ± std over seeds; then each pair of
  arms' differences with Welch's p.
- ``tasks`` — Tables 3 and 4: arms × (task, metric) columns plus the mean over columns,
  then each pair of arms' differences per column with Welch's p and the number of
  comparisons made. A stage (a multi-task checkpoint the arms start from) gets a row of
  its own dev metrics before any fine-tuning.

Both layouts then pair the runs of one (seed, stage seed) across arms and give the paired
differences with the paired t-test's p, and, where the config quotes the paper, the
paper's sign of each difference beside ours.

Every test counts independent samples: a run, or, for an arm fine-tuned from stages, a
stage seed (the mean of its runs), since runs from one stage share its weights and a test
over them would leave stage-1 variance out (:func:`independent`).

Every number is in percent. A record is one run (see :mod:`mtdnn.experiment`); its
``metrics`` map task → metric → value.
"""

from __future__ import annotations

import csv
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from mtdnn.analysis.selection import Record, run_means, seeded_values, task_columns, values
from mtdnn.analysis.smart_tables import smart_terms_table
from mtdnn.analysis.statistics import (
    WELCH_UNITS,
    described,
    difference,
    mean_std,
    paired_difference,
    table_head,
    welch,
)
from mtdnn.files import atomic_path


def paired_table(pairs: list[tuple[str, str]], columns: dict[str, tuple[str, str, str | None]],
                 records: list[Record]) -> str:
    """Each pair of arms' differences run by run, paired by (seed, stage seed): the seed
    fixes a run's head initialisation and batch order in every arm of this project's
    trainer, so much of the seed-to-seed spread cancels (a pairing that shares less only
    costs the test power). ``columns[label]`` = task, metric, subset or None. Empty
    when no pair has two matched runs in a column."""
    rows = [(later, earlier, [paired_difference(seeded_values(records, later, *columns[label]),
                                                seeded_values(records, earlier, *columns[label]))
                              for label in columns])
            for later, earlier in pairs]
    rows = [row for row in rows if any(cell != "—" for cell in row[2])]
    if not rows:
        return ""
    tested = sum("p " in cell for row in rows for cell in row[2])
    lines = ["", "Paired differences (points; the runs of one seed and stage seed paired, "
                 "and the differences of one stage seed averaged: mean ± std of the "
                 "differences, paired t-test p, n of them, a p from 3 or more; "
                 f"{tested} comparison{'s' * (tested != 1)}, not corrected for multiple "
                 "comparisons):", "",
             *table_head(list(columns), first="pair")]
    lines += [f"| {later} − {earlier} | " + " | ".join(cells) + " |"
              for later, earlier, cells in rows]
    return "\n".join(lines) + "\n"


def write_csv(records: list[Record], path: Path) -> None:
    """One row per run, task and metric."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["arm", "task", "subset", "train_size", "seed", "stage_seed",
                         "metric_task", "metric", "value", "steps", "wall_seconds"])
        for r in records:
            for task, metrics in r["metrics"].items():
                for metric, value in metrics.items():
                    writer.writerow([r["arm"], r["task"], r["subset"], r.get("train_size", ""),
                                     r["seed"], r.get("stage_seed", ""), task, metric, value,
                                     r.get("steps", ""), r.get("wall_seconds", "")])


def arm_pairs(arms: list[str], baseline: str | None) -> list[tuple[str, str]]:
    """(later, earlier) pairs to compare: every arm against ``baseline``, or all pairs."""
    if baseline is not None:
        return [(arm, baseline) for arm in arms if arm != baseline]
    return [(later, earlier) for earlier, later in combinations(arms, 2)]


def subsets_table(tasks: list[str], subsets: dict[str, list[str]], per_task_heads: bool,
                  sizes: dict[str, dict[str, dict[str, Any]]], arms: list[str],
                  records: list[Record], baseline: str | None = None,
                  runs_on: dict[str, set[str]] | None = None, scored_on: str = "dev") -> str:
    """Table 5's layout. ``sizes[task][subset]`` has ``size``, ``available`` and, for a
    subset not run, the ``reason``; ``runs_on[arm]``, the tasks an arm runs on (default:
    all; the others are left out of that task's block); ``scored_on``: what the runs are
    scored on ("dev", or "tuning" for a split carved from train)."""
    lines = [] if per_task_heads else table_head(subsets[tasks[0]])
    for task in tasks:
        if per_task_heads:
            lines += ([""] if lines and lines[-1] else []) + table_head(subsets[task])
        lines.append(f"| **{task} ({scored_on} accuracy %)** |" + " |" * len(subsets[task]))
        lines.append("| #Training Data | " + " | ".join(
            f"{sizes[task][s]['size']:,}" for s in subsets[task]) + " |")
        for arm in arms:
            if runs_on is not None and task not in runs_on[arm]:
                continue
            cells = [mean_std(values(records, arm, task, "accuracy", s))
                     if sizes[task][s]["available"] else f"n/a ({sizes[task][s]['reason']})"
                     for s in subsets[task]]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    pairs = arm_pairs(arms, baseline)
    return "\n".join(lines) + "\n\n" + subsets_differences(
        tasks, subsets, per_task_heads, sizes, pairs, records, runs_on, scored_on) + \
        smart_terms_table(arms, records)


def subsets_differences(tasks: list[str], subsets: dict[str, list[str]],
                        per_task_heads: bool, sizes: dict[str, dict[str, dict[str, Any]]],
                        pairs: list[tuple[str, str]], records: list[Record],
                        runs_on: dict[str, set[str]] | None = None,
                        scored_on: str = "dev") -> str:
    """Arms' differences in accuracy points, with Welch's t-test p over seeds: with 3
    seeds a gap of a point can be noise, and the table says so."""
    if not pairs:
        return ""
    lines = [f"Differences (points of {scored_on} accuracy; {WELCH_UNITS}):", ""]
    if not per_task_heads:
        lines += table_head(subsets[tasks[0]])
    for task in tasks:
        if per_task_heads:
            lines += ([""] if lines and lines[-1] else []) + table_head(subsets[task])
        lines.append(f"| **{task}** |" + " |" * len(subsets[task]))
        for later, earlier in pairs:
            if runs_on is not None and not {later, earlier} <= {
                    arm for arm, on in runs_on.items() if task in on}:
                continue
            cells = [difference(seeded_values(records, later, task, "accuracy", s),
                                seeded_values(records, earlier, task, "accuracy", s))
                     if sizes[task][s]["available"] else "n/a" for s in subsets[task]]
            lines.append(f"| {later} − {earlier} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def sign_pattern_table(paper: dict[str, dict[str, float]], pairs: list[tuple[str, str]],
                       columns: dict[str, tuple[str, str, str | None]],
                       records: list[Record]) -> str:
    """The paper's differences beside ours, column by column: does each comparison go the
    way the paper's did? ``paper[arm][label]`` is the paper's number for our column
    ``label`` (``columns[label]`` = task, metric, subset or None)."""
    shown = [(later, earlier) for later, earlier in pairs if later in paper and earlier in paper]
    labels = [label for label in columns if any(label in paper[arm] for pair in shown
                                                for arm in pair)]
    if not shown or not labels:
        return ""
    lines = ["", "Sign pattern against the paper (the paper's difference → ours, Welch's p "
                 "as in the differences; "
                 "✓ the same sign, ✗ the opposite):", "", *table_head(labels, first="pair")]
    same = signed = total = significant = significant_same = 0
    for later, earlier in shown:
        cells = []
        for label in labels:
            if label not in paper[later] or label not in paper[earlier]:
                cells.append("—")
                continue
            task, metric, subset = columns[label]
            theirs = paper[later][label] - paper[earlier][label]
            a = seeded_values(records, later, task, metric, subset)
            b = seeded_values(records, earlier, task, metric, subset)
            ours, mark = "not run", ""
            if a and b:
                gap, p, over = welch(a, b)
                ours = described(gap, p, over)
                total, signed = total + 1, signed + (theirs != 0)
                agrees = theirs != 0 and np.sign(gap) == np.sign(theirs)
                if agrees:
                    same, mark = same + 1, " ✓"
                elif theirs != 0 and gap != 0:
                    mark = " ✗"
                if p is not None and p < 0.05:
                    significant, significant_same = significant + 1, significant_same + agrees
            cells.append(f"{theirs:+.1f} → {ours}{mark}")
        lines.append(f"| {later} − {earlier} | " + " | ".join(cells) + " |")
    # a difference the paper rounds to zero has no sign to match: counted apart
    unsigned = f" ({total - signed} more where the paper's is 0.0)" if signed < total else ""
    lines += ["", f"The same sign as the paper in {same} of {signed} comparisons run{unsigned}; "
                  f"p < 0.05 in {significant} of the {total}, {significant_same} of them "
                  f"with the paper's sign."]
    return "\n".join(lines) + "\n"


def curve_metric(metrics: dict[str, float]) -> str:
    """The metric a learning curve follows: accuracy where a task has it."""
    return "accuracy" if "accuracy" in metrics else next(iter(metrics))


def learning_curve_table(arms: list[str], records: list[Record], tasks: list[str],
                         within: float = 0.5) -> str:
    """Each arm's dev (or tuning) metric after every epoch, mean ± std over seeds, per task
    and as the mean over tasks; then the smallest epoch whose mean over tasks is within
    ``within`` points of the best epoch's (the fine-tuning length rule, docs/results.md).
    Empty unless runs were evaluated after more than one epoch."""
    curves = [r for r in records if len(r.get("evaluations") or []) > 1]
    if not curves:
        return ""
    lines = []
    for arm in arms:
        mine = [r for r in curves if r["arm"] == arm]
        if not mine:
            continue
        names = [t for t in tasks if any(r["task"] == t for r in mine)]
        epochs = sorted({e["epoch"] for r in mine for e in r["evaluations"]})
        # per (task, epoch): each seed's value; per epoch: each seed's mean over tasks
        at: dict[tuple[str, int], list[float]] = {}
        for r in mine:
            for e in r["evaluations"]:
                metrics = e["metrics"][r["task"]]
                at.setdefault((r["task"], e["epoch"]), []).append(
                    100 * metrics[curve_metric(metrics)])
        metric_names = {t: curve_metric(next(r for r in mine if r["task"] == t)["metrics"][t])
                        for t in names}
        lines += ["", f"Learning curve of {arm} (after each epoch; mean ± std over seeds):", "",
                  *table_head([f"{t} {metric_names[t]}" for t in names] + ["mean over tasks"],
                              first="epoch")]
        means = {}
        for epoch in epochs:
            complete = all((t, epoch) in at for t in names)
            means[epoch] = (float(np.mean([np.mean(at[(t, epoch)]) for t in names]))
                            if complete else None)
            cells = [mean_std(at.get((t, epoch), [])) for t in names]
            lines.append(f"| {epoch} | " + " | ".join(cells) + " | "
                         + ("—" if means[epoch] is None else f"{means[epoch]:.1f}") + " |")
        done = {e: m for e, m in means.items() if m is not None}
        if done:
            best = max(done, key=done.get)
            chosen = min(e for e, m in done.items() if m >= done[best] - within)
            lines += ["", f"Best mean over tasks after epoch {best} ({done[best]:.2f}); the "
                          f"smallest epoch within {within} points of it: **{chosen}** "
                          f"({done[chosen]:.2f})."]
    return "\n".join(lines) + "\n" if lines else ""


def tasks_table(arms: list[str], records: list[Record],
                stage_rows: dict[str, dict[str, dict[str, float]]],
                tasks: list[str] = (), baseline: str | None = None) -> str:
    """Arms × (task, metric), mean ± std over seeds, then the pairwise differences."""
    columns = task_columns(records, tasks)
    if not columns:  # the columns are the finished runs' metrics
        return f"No run has finished yet (arms: {', '.join(arms)}).\n"
    lines = table_head([f"{t} {m}" for t, m in columns] + ["mean"], first="arm")
    for name, metrics in stage_rows.items():
        cells = [f"{100 * metrics[t][m]:.1f}" if m in metrics.get(t, {}) else "—"
                 for t, m in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " | — |")
    for arm in arms:
        cells = [mean_std(values(records, arm, t, m)) for t, m in columns]
        lines.append(f"| {arm} | " + " | ".join(cells)
                     + f" | {mean_std(list(run_means(records, arm, columns).values()))} |")
    pairs = arm_pairs(arms, baseline)
    if not pairs or not columns:
        return "\n".join(lines) + "\n" + smart_terms_table(arms, records)
    lines += ["", f"Differences (points; {WELCH_UNITS}; "
              f"{len(pairs) * (len(columns) + 1)} comparisons, not corrected for "
              "multiple comparisons):", ""]
    lines += table_head([f"{t} {m}" for t, m in columns] + ["mean"], first="pair")
    for later, earlier in pairs:
        cells = [difference(seeded_values(records, later, t, m),
                            seeded_values(records, earlier, t, m)) for t, m in columns]
        cells.append(difference(run_means(records, later, columns),
                                run_means(records, earlier, columns)))
        lines.append(f"| {later} − {earlier} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + smart_terms_table(arms, records)
