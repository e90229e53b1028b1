"""Plots of results files (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mtdnn.files import atomic_path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, rect: tuple[float, ...] = (0, 0, 1, 1)) -> None:
    """Lay the axes out within ``rect`` (figure fractions: room for a figure legend) and
    write the PNG atomically."""
    fig.tight_layout(rect=rect)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    _pyplot().close(fig)


def plot_subsets(rows: list[dict[str, Any]], tasks: tuple[str, ...] | list[str],
                 arms: list[str], path: Path) -> None:
    """Dev accuracy vs training examples (log x), one line per arm, error bars =
    standard deviation over seeds; one panel per task."""
    import matplotlib.ticker

    plt = _pyplot()

    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for number, arm in enumerate(arms):
            # Nudge each line sideways a little so that error bars do not hide each other.
            nudge = 1 + 0.04 * (number - (len(arms) - 1) / 2)
            mine = [r for r in rows if r["task"] == task and r["arm"] == arm]
            sizes = sorted({r["train_size"] for r in mine})
            if not sizes:
                continue
            values = [[100 * r["metrics"][task]["accuracy"] for r in mine
                       if r["train_size"] == n]
                      for n in sizes]
            means = [np.mean(v) for v in values]
            stds = [np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in values]
            ax.errorbar([n * nudge for n in sizes], means, yerr=stds, marker="o", capsize=3,
                        label=arm)
        ax.set_xscale("log")
        # Label the subset sizes themselves; log-scale minor labels overlap at small sizes.
        task_sizes = sorted({r["train_size"] for r in rows if r["task"] == task})
        if task_sizes:
            ax.set_xticks(task_sizes, [f"{n:,}" for n in task_sizes])
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("training examples")
        ax.set_ylabel("dev accuracy (%)")
        ax.set_title(task)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend()
        else:  # a partial sweep: say so instead of an empty, unlabelled panel
            ax.text(0.5, 0.5, "no finished runs yet", transform=ax.transAxes,
                    ha="center", va="center", color="grey")
    _save(fig, path)


def plot_arms(rows: list[dict[str, Any]], columns: list[tuple[str, str]], arms: list[str],
              path: Path) -> None:
    """One panel per (task, metric): each arm's mean with a bar of ± one standard deviation
    over seeds, and every run as a dot, so that the spread is visible."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, max(len(columns), 1), figsize=(3 + 2.2 * len(columns), 4),
                             squeeze=False)
    for ax, (task, metric) in zip(axes[0], columns, strict=False):
        for x, arm in enumerate(arms):
            found = [100 * r["metrics"][task][metric] for r in rows
                     if r["arm"] == arm and metric in r["metrics"].get(task, {})]
            if not found:
                continue
            spread = np.std(found, ddof=1) if len(found) > 1 else 0.0
            ax.errorbar([x], [np.mean(found)], yerr=[spread], marker="o", capsize=4,
                        color="black")
            ax.scatter([x + 0.15] * len(found), found, s=10, alpha=0.6)
        ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right")
        ax.set_title(f"{task} {metric} (%)")
        ax.grid(True, axis="y", alpha=0.3)
    _save(fig, path)
