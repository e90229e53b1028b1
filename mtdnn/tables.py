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

from mtdnn.files import atomic_path

Record = dict[str, Any]


def mean_std(values: list[float]) -> str:
    if not values:
        return "not run"
    if len(values) == 1:
        return f"{values[0]:.1f} (1 seed)"
    return f"{np.mean(values):.1f} ± {np.std(values, ddof=1):.1f}"


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Welch's t-test p of two samples; None without two runs a side and some spread."""
    if min(len(a), len(b)) < 2 or np.var(a) + np.var(b) == 0:
        return None
    from scipy import stats

    # from the summary statistics: scipy's ttest_ind warns of "catastrophic cancellation"
    # whenever one side is constant, which is a legitimate sample here (e.g. equal accuracies)
    return float(stats.ttest_ind_from_stats(
        np.mean(a), np.std(a, ddof=1), len(a), np.mean(b), np.std(b, ddof=1), len(b),
        equal_var=False).pvalue)


# A run's value keyed by the run: (subset, seed, stage seed or None).
Keyed = dict[tuple[Any, Any, Any], float]
STAGE_SEED = "stage seed"
WELCH_UNITS = ("Welch's t-test p over seeds; an arm fine-tuned from stages counts each stage "
               "seed once, the mean of its runs")


def independent(keyed: Keyed) -> tuple[list[float], str]:
    """The independent samples among runs, and their unit ("seed" or "stage seed").

    Runs fine-tuned from one stage seed share its weights, so they are not independent
    draws: each stage seed's runs count as one sample, their mean. A test over the runs
    themselves would leave stage-1 variance out of the spread and give too small a p for
    what a new stage-1 run would do. Runs without a stage are each a sample."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for (subset, seed, stage_seed), value in keyed.items():
        unit = ("stage", stage_seed) if stage_seed is not None else ("seed", seed)
        groups.setdefault((subset, *unit), []).append(value)
    staged = any(key[1] == "stage" for key in groups)
    return [float(np.mean(v)) for v in groups.values()], STAGE_SEED if staged else "seed"


def welch(a: Keyed, b: Keyed) -> tuple[float, float | None, str]:
    """``a − b`` over independent samples (:func:`independent`), Welch's p and what p is
    over. With one stage seed a side, p is over that side's runs: a comparison given that
    stage's weights, which says nothing of another stage-1 run, and the label says so."""
    (xs, x_unit), (ys, y_unit) = independent(a), independent(b)
    gap = float(np.mean(xs) - np.mean(ys))
    if min(len(xs), len(ys)) >= 2:
        return gap, welch_p(xs, ys), ""
    if min(len(a), len(b)) >= 2 and STAGE_SEED in (x_unit, y_unit):
        return (float(np.mean(list(a.values())) - np.mean(list(b.values()))),
                welch_p(list(a.values()), list(b.values())), " over runs of 1 stage seed")
    short = x_unit if len(xs) < 2 else y_unit
    return gap, None, f"no p: 1 {short}"


def difference(a: Keyed, b: Keyed, digits: int = 1) -> str:
    """``mean(a) − mean(b)`` with Welch's p (:func:`welch`); p needs two samples a side and
    some spread."""
    if not a or not b:
        return "not run"
    return described(*welch(a, b), digits)


def described(gap: float, p: float | None, over: str, digits: int = 1) -> str:
    """A :func:`welch` result as a table cell, e.g. ``+2.1 (p = 0.034)``."""
    if over.startswith("no p"):
        return f"{signed_gap(gap, digits)} ({over})"
    if p is None:
        return f"{signed_gap(gap, digits)} (no p: no spread)"
    return f"{signed_gap(gap, digits)} ({p_value(p)}{over})"


def signed_gap(gap: float, digits: int = 1) -> str:
    text = f"{gap:+.{digits}f}"
    # a tiny negative gap rounds to a signed zero
    return text.replace("-", "+") if float(text) == 0 else text


def p_value(p: float) -> str:
    return f"p = {p:.3f}" if p >= 0.001 else "p < 0.001"


def paired_difference(a: Keyed, b: Keyed) -> str:
    """The mean ± std of ``a[k] − b[k]`` over the runs both arms have, with the paired
    t-test's p; the differences of one stage seed are averaged first (:func:`independent`),
    unless there is only one stage seed (then p is over its runs, and says so). "—" with
    fewer than two such runs."""
    keys = [key for key in a if key in b]
    if len(keys) < 2:
        return "—"
    gaps, unit = independent({key: a[key] - b[key] for key in keys})
    count = f"n = {len(gaps)}" + (f" {unit}s" if unit == STAGE_SEED else "")
    if len(gaps) < 2:  # one stage seed: its runs, given its weights
        gaps, count = [a[key] - b[key] for key in keys], f"n = {len(keys)} runs of 1 stage seed"
    gaps = np.array(gaps)
    gap = f"{signed_gap(float(gaps.mean()))} ± {gaps.std(ddof=1):.1f}"
    if np.ptp(gaps) == 0:
        return f"{gap} (no p: no spread, {count})"
    from scipy import stats

    return f"{gap} ({p_value(float(stats.ttest_1samp(gaps, 0.0).pvalue))}, {count})"


def table_head(columns: list[str], first: str = "Model") -> list[str]:
    return [f"| {first} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]


def runs_with(records: list[Record], arm: str, task: str, metric: str,
              subset: str | None = None) -> list[Record]:
    """An arm's runs that measured one task metric (on ``subset``, if given)."""
    return [r for r in records
            if r["arm"] == arm and task in r["metrics"] and metric in r["metrics"][task]
            and (subset is None or r["subset"] == subset)]


def values(records: list[Record], arm: str, task: str, metric: str,
           subset: str | None = None) -> list[float]:
    """An arm's values of one task metric over its runs (seeds), in percent."""
    return [100 * r["metrics"][task][metric]
            for r in runs_with(records, arm, task, metric, subset)]


def run_key(record: Record) -> tuple[Any, Any, Any]:
    """How :data:`Keyed` names a run: (subset, seed, stage seed or None)."""
    return record["subset"], record["seed"], record.get("stage_seed")


def seeded_values(records: list[Record], arm: str, task: str, metric: str,
                  subset: str | None = None) -> dict[tuple[Any, ...], float]:
    """An arm's values of one task metric keyed by each run's (subset, seed, stage seed), in
    percent: with this project's trainer, the runs of two arms with one key share their
    head's start weights and their batch order, so they pair."""
    return {run_key(r): 100 * r["metrics"][task][metric]
            for r in runs_with(records, arm, task, metric, subset)}


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
    lines = ["", "Paired differences (points; the runs of one seed and stage seed paired, "
                 "and the differences of one stage seed averaged: mean ± std of the "
                 "differences, paired t-test p, n of them; "
                 f"{sum(cell != '—' for row in rows for cell in row[2])} comparisons, not "
                 "corrected for multiple comparisons):", "",
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


# --- Table 5: arms × training-set sizes -------------------------------------------------

def arm_pairs(arms: list[str], baseline: str | None) -> list[tuple[str, str]]:
    """(later, earlier) pairs to compare: every arm against ``baseline``, or all pairs."""
    if baseline is not None:
        return [(arm, baseline) for arm in arms if arm != baseline]
    return [(later, earlier) for earlier, later in combinations(arms, 2)]


def smart_terms_table(arms: list[str], records: list[Record]) -> str:
    """The evidence that SMART acted: per arm and task, the median over runs of each run's
    median logged λ_s·R_s ÷ task loss, ‖δ‖∞ and μ·D_Breg ÷ task loss; where the records
    have them, the share of the start weights left in the teacher at the end and the mean
    entropy of the dev predictions (plain's too: a SMART whose entropy stays near a uniform
    guess has not freed its student), then each arm's resolved SMART settings."""
    extra = any("dev_entropy" in r for r in records)
    logged = [r for r in records if r.get("smart_terms") or (extra and r.get("dev_entropy"))]
    if not logged:
        return ""
    heads = [label for _, label in TERMS] + (
        ["teacher's start share at the end", "dev entropy (nats)"] if extra else [])
    what = ("Logged SMART terms, and the mean entropy of each arm's dev predictions (median "
            "over runs of each run's median; plain's entropy, where logged, is the level of a "
            "student nothing holds back):" if extra else
            "Logged SMART terms (median over runs of each run's median):")
    lines = ["", what, "",
             *table_head(["task", *heads], first="arm")]
    marked = False
    for arm in arms:
        for task in dict.fromkeys(r["task"] for r in logged if r["arm"] == arm):
            mine = [r for r in logged if r["arm"] == arm and r["task"] == task]
            cells = terms_cells(mine)
            if extra:
                share = start_share_cell(mine)
                entropies = [r["dev_entropy"][task] for r in mine
                             if task in (r.get("dev_entropy") or {})]
                cells += [share, f"{np.median(entropies):.3f}" if entropies else "—"]
                marked = marked or share.endswith("*")
            lines.append(f"| {arm} | {task} | " + " | ".join(cells) + " |")
    if marked:
        lines += ["", "*: records from before the share was logged: computed from the arm's "
                      "teacher schedule and the run's steps."]
    return "\n".join(lines) + "\n" + smart_settings_table(arms, records)


TERMS = (("adv_ratio", "λ_s·R_s ÷ loss"), ("delta_linf", "‖δ‖∞"),
         ("bregman_ratio", "μ·D_Breg ÷ loss"))


def terms_cells(records: list[Record]) -> list[str]:
    """Each logged SMART term's median over ``records`` of each one's median."""
    terms = [r.get("smart_terms") or {} for r in records]
    return [f"{np.median([t[n]['median'] for t in terms if n in t]):.2g}"
            if any(n in t for t in terms) else "—" for n, _ in TERMS]


def stage_terms_table(stages: dict[str, list[Record]]) -> str:
    """The multi-task stages with SMART: their logged terms (over all the stage's tasks;
    median over stage seeds of each seed's median) and the teacher's share of the start
    weights at the end, then their settings; the stage is where MT-DNN-SMART's own SMART
    acts, before any fine-tuning."""
    rows = {f"stage {name}": [{**r, "arm": f"stage {name}"} for r in found]
            for name, found in stages.items() if found and resolved_smart(found[0])}
    if not rows:
        return ""
    lines = ["", "SMART in the multi-task stages (all their tasks; median over stage seeds "
             "of each seed's median):", "",
             *table_head([label for _, label in TERMS]
                         + ["teacher's start share at the end"], first="stage")]
    marked = False
    for label, found in rows.items():
        share = start_share_cell(found)
        marked = marked or share.endswith("*")
        lines.append(f"| {label} | " + " | ".join([*terms_cells(found), share]) + " |")
    if marked:
        lines += ["", "*: records from before the share was logged: computed from the "
                      "stage's teacher schedule and steps."]
    return "\n".join(lines) + "\n" + smart_settings_table(
        list(rows), [r for found in rows.values() for r in found], first="stage")


def resolved_smart(record: Record) -> dict[str, Any] | None:
    """A SMART record's settings, every key after the preset; for a record from before
    records kept them, its keys resolved as this version resolves them (the presets have
    kept their values since those runs). ``None`` for a run without SMART."""
    if record.get("smart_settings"):
        return record["smart_settings"]
    smart = (record.get("train_keys") or {}).get("smart")
    if not (isinstance(smart, dict) and smart.get("enabled")):
        return None
    from mtdnn.config import resolve_config
    from mtdnn.schema import to_dict

    return to_dict(resolve_config({"smart": smart}, tasks_later=True).smart)


def start_share_cell(records: list[Record]) -> str:
    """The median over ``records`` of the teacher's logged share of the start weights at the
    end; where none was logged, computed from the schedule and marked * ; "—" without a
    teacher."""
    logged = [r["teacher_start_share"] for r in records
              if r.get("teacher_start_share") is not None]
    if logged:
        return f"{np.median(logged):.2g}"
    computed = [share for r in records for share in [schedule_start_share(r)]
                if share is not None]
    return f"{np.median(computed):.2g}*" if computed else "—"


def schedule_start_share(record: Record) -> float | None:
    """The teacher's share of the start weights at the run's end, from its schedule and its
    steps (the run's only update count a record from before the logged share keeps; for a
    run that stopped early, whose schedule was laid over more updates, it is an upper
    bound); ``None`` for a run without a teacher."""
    from mtdnn.smart import teacher_start_share

    settings = resolved_smart(record)
    if not settings or not settings.get("bregman_weight") or not record.get("steps"):
        return None
    every = settings["teacher_update_every"]
    updates = record["steps"] // every
    return teacher_start_share(updates, updates, settings["teacher_beta_early"],
                               settings["teacher_beta_late"],
                               settings["teacher_early_fraction"],
                               settings["teacher_schedule"], settings["teacher_lag_fraction"])


SETTINGS = (("epsilon", "ε"), ("adv_weight", "λ_s"), ("bregman_weight", "μ"),
            ("teacher_schedule", "teacher"), ("teacher_lag_fraction", "lag ÷ run"),
            ("preset", "preset"))


def smart_settings_table(arms: list[str], records: list[Record], first: str = "arm") -> str:
    """Each SMART arm's settings as its records resolved them (every key after the preset),
    so that a row says what ran without the preset table of its day. An arm whose records
    predate resolved settings (marked *) shows its keys resolved as this version resolves
    them (the presets have kept their values since those runs). The teacher's cells are
    empty where μ = 0 (no teacher), the lag's where the schedule is not ``scaled``."""
    found = {r["arm"]: r["smart_settings"] for r in records if r.get("smart_settings")}
    named: dict[str, dict[str, Any]] = {}
    for r in records:  # one resolution per arm: its runs share their keys
        if r["arm"] not in found and r["arm"] not in named:
            settings = resolved_smart(r)
            if settings:
                named[r["arm"]] = settings
    if not found and not named:
        return ""

    def cells(settings: dict[str, Any]) -> str:
        shown = dict(settings)
        if not shown.get("bregman_weight"):
            shown["teacher_schedule"] = None
        if shown.get("teacher_schedule") != "scaled":
            shown["teacher_lag_fraction"] = None
        return " | ".join("—" if shown.get(key) is None else f"{shown[key]:g}"
                          if isinstance(shown[key], float) else str(shown[key])
                          for key, _ in SETTINGS)

    lines = ["", f"SMART settings of each {first} (as its records resolved them; *: records "
             "from before they kept them, their keys resolved by this version):", "",
             *table_head([label for _, label in SETTINGS], first=first)]
    for arm in arms:
        if arm in found:
            lines.append(f"| {arm} | {cells(found[arm])} |")
        elif arm in named:
            lines.append(f"| {arm} * | {cells(named[arm])} |")
    return "\n".join(lines) + "\n"


def subsets_table(tasks: list[str], subsets: dict[str, list[str]], per_task_heads: bool,
                  sizes: dict[str, dict[str, dict[str, Any]]], arms: list[str],
                  records: list[Record], baseline: str | None = None,
                  runs_on: dict[str, set[str]] | None = None) -> str:
    """Table 5's layout. ``sizes[task][subset]`` has ``size``, ``available`` and, for a
    subset not run, the ``reason``; ``runs_on[arm]``, the tasks an arm runs on (default:
    all; the others are left out of that task's block)."""
    lines = [] if per_task_heads else table_head(subsets[tasks[0]])
    for task in tasks:
        if per_task_heads:
            lines += ([""] if lines and lines[-1] else []) + table_head(subsets[task])
        lines.append(f"| **{task} (dev accuracy %)** |" + " |" * len(subsets[task]))
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
        tasks, subsets, per_task_heads, sizes, pairs, records, runs_on) + \
        smart_terms_table(arms, records)


def subsets_differences(tasks: list[str], subsets: dict[str, list[str]],
                        per_task_heads: bool, sizes: dict[str, dict[str, dict[str, Any]]],
                        pairs: list[tuple[str, str]], records: list[Record],
                        runs_on: dict[str, set[str]] | None = None) -> str:
    """Arms' differences in dev accuracy points, with Welch's t-test p over seeds: with 3
    seeds a gap of a point can be noise, and the table says so."""
    if not pairs:
        return ""
    lines = [f"Differences (points of dev accuracy; {WELCH_UNITS}):", ""]
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


# --- Tables 3 and 4: arms × tasks ---------------------------------------------------------

def task_columns(records: list[Record], tasks: list[str] = ()) -> list[tuple[str, str]]:
    """(task, metric) columns: in ``tasks``' order (the config's), then by name."""
    found = {(task, metric) for r in records for task, metrics in r["metrics"].items()
             for metric in metrics}
    order = {task: i for i, task in enumerate(tasks)}
    return sorted(found, key=lambda c: (order.get(c[0], len(order)), c))


def run_means(records: list[Record], arm: str, columns: list[tuple[str, str]]) -> Keyed:
    """The mean over all columns of each seed's runs (a seed's runs on several tasks are
    one sample), for seeds that have every column, keyed as :func:`seeded_values` keys a
    run (with no subset: the tasks' subsets differ)."""
    by_seed: dict[tuple[Any, Any], dict[str, dict[str, float]]] = {}
    for r in records:
        if r["arm"] == arm:
            merged = by_seed.setdefault((r["seed"], r.get("stage_seed")), {})
            for task, metrics in r["metrics"].items():
                merged.setdefault(task, {}).update(metrics)
    return {(None, *key): 100 * sum(m[t][k] for t, k in columns) / len(columns)
            for key, m in by_seed.items() if all(k in m.get(t, {}) for t, k in columns)}


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
