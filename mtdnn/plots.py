"""Plots of results files (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mtdnn.files import atomic_path


def plot_sweep(rows: list[dict[str, Any]], tasks: tuple[str, ...] | list[str],
               start_points: list[str], path: Path) -> None:
    """Dev accuracy vs training examples (log x), one line per start point, error bars =
    standard deviation over seeds; one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for number, start in enumerate(start_points):
            # Nudge each line sideways a little so that error bars do not hide each other.
            nudge = 1 + 0.04 * (number - (len(start_points) - 1) / 2)
            mine = [r for r in rows if r["task"] == task and r["start_point"] == start]
            sizes = sorted({r["train_size"] for r in mine})
            if not sizes:
                continue
            values = [[100 * r["metrics"]["accuracy"] for r in mine if r["train_size"] == n]
                      for n in sizes]
            means = [np.mean(v) for v in values]
            stds = [np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in values]
            ax.errorbar([n * nudge for n in sizes], means, yerr=stds, marker="o", capsize=3,
                        label=start)
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
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
