"""The tests behind every table, and how their results are written: mean ± std, Welch's
t-test over independent samples (a stage seed counts once), the paired t-test over runs of
one seed, and a difference with its p."""

from __future__ import annotations

from typing import Any

import numpy as np


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


# A paired t-test needs this many differences for a p (fewer: "n too small").
MIN_PAIRED = 3


def paired_gaps(a: Keyed, b: Keyed) -> tuple[np.ndarray, str] | None:
    """The differences ``a[k] − b[k]`` over the runs both arms have, those of one stage
    seed averaged first (:func:`independent`), unless there is only one stage seed (then
    its runs, given its weights); and what they count. None with fewer than two runs."""
    keys = [key for key in a if key in b]
    if len(keys) < 2:
        return None
    gaps, unit = independent({key: a[key] - b[key] for key in keys})
    count = f"n = {len(gaps)}" + (f" {unit}s" if unit == STAGE_SEED else "")
    if len(gaps) < 2:  # one stage seed: its runs, given its weights
        gaps, count = [a[key] - b[key] for key in keys], f"n = {len(keys)} runs of 1 stage seed"
    return np.array(gaps), count


def paired_p(gaps: np.ndarray) -> float | None:
    """The paired t-test's p over ``gaps``; None with fewer than :data:`MIN_PAIRED` of them
    or no spread."""
    if len(gaps) < MIN_PAIRED or np.ptp(gaps) == 0:
        return None
    from scipy import stats

    return float(stats.ttest_1samp(gaps, 0.0).pvalue)


def paired_difference(a: Keyed, b: Keyed) -> str:
    """The mean ± std of the paired differences (:func:`paired_gaps`) with the paired
    t-test's p; "n too small" under :data:`MIN_PAIRED` differences, "—" under two."""
    found = paired_gaps(a, b)
    if found is None:
        return "—"
    gaps, count = found
    gap = f"{signed_gap(float(gaps.mean()))} ± {gaps.std(ddof=1):.1f}"
    if len(gaps) < MIN_PAIRED:
        return f"{gap} (n too small: {count})"
    if np.ptp(gaps) == 0:
        return f"{gap} (no p: no spread, {count})"
    return f"{gap} ({p_value(paired_p(gaps))}, {count})"


def holm(ps: list[float], alpha: float = 0.05) -> list[bool]:
    """Which of ``ps`` are significant after Holm's step-down correction (family-wise
    ``alpha``): the k-th smallest p passes if it and every smaller one is below
    alpha / (m − k + 1)."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    passed = [False] * len(ps)
    for rank, index in enumerate(order):
        if ps[index] > alpha / (len(ps) - rank):
            break
        passed[index] = True
    return passed


def table_head(columns: list[str], first: str = "Model") -> list[str]:
    return [f"| {first} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
