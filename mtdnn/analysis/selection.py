"""Which records a cell of a table reads: the runs of an arm on a task and metric, keyed by
(seed, stage seed, subset) so that arms pair by seed."""

from __future__ import annotations

from typing import Any

from mtdnn.analysis.statistics import Keyed

Record = dict[str, Any]


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
