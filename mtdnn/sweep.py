"""Domain-adaptation sweep (SMART paper, Section 5.4, Table 5).

    python -m mtdnn.sweep --config experiments/domain_adaptation.yaml [key=value ...]
    python -m mtdnn.sweep --config ... --report-only   # tables from finished cells only

Runs the grid {start points} × {train subsets} × {seeds}; each cell fine-tunes from its
start point on one subset (drawn by ``python -m data_prep subsets``) and is scored on the
task's dev set. A finished cell (its ``result.json`` exists) is skipped and an interrupted
one resumes from its last checkpoint, so the sweep can run in several parts; a finished
cell whose training keys or start weights differ from the sweep's now is an error (the
table never mixes runs that cannot be compared; ``--report-only`` checks the keys). Writes
``results.csv`` (one row per run), ``results.md`` (Table 5's layout: start points × subset
sizes, mean ± std over seeds, with the row of training-set sizes, then each pair of start
points' differences with Welch's p) and ``results.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mtdnn.checkpoint import continue_keys, weights_fingerprint
from mtdnn.config import config_from_dict, load_mapping
from mtdnn.errors import MtdnnError, run_cli
from mtdnn.files import (
    atomic_path,
    atomic_write_json,
    atomic_write_text,
    make_output_dir,
    read_json,
)
from mtdnn.schema import build, to_dict
from mtdnn.trainer import train

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartPoint:
    """Where a cell starts (a checkpoint folder, or null for the plain encoder) and any
    training keys of its own, e.g. ``{smart: {enabled: true}}`` for a SMART arm."""

    init: str | None = None
    train: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepConfig:
    """The grid, and the training config every cell starts from."""

    tasks: tuple[str, ...] = ("scitail", "snli")
    # the same subsets for every task, or task -> its own subsets
    subsets: tuple[str, ...] | dict[str, tuple[str, ...]] = ("0.1pct", "1pct", "10pct",
                                                              "100pct")
    subset_seed: int = 13
    seeds: tuple[int, ...] = (13, 14, 15)
    # name -> checkpoint folder, null (the plain pre-trained encoder) or a StartPoint mapping
    start_points: dict[str, StartPoint] = field(
        default_factory=lambda: {"encoder": StartPoint()})
    # Larger subsets appear in the table as "n/a (not run: ...)" instead of being trained.
    max_train_rows: int | None = None
    data_dir: str = "data"
    # task -> dev file scored instead of <data_dir>/<task>/dev.jsonl (e.g. a tuning split
    # drawn from train with `data_prep subsets --holdout`)
    dev: dict[str, str] = field(default_factory=dict)
    output_dir: str = "runs/domain_adaptation"
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig keys for every cell


@dataclass(frozen=True)
class Cell:
    start: str
    task: str
    subset: str
    seed: int


def load_sweep_config(path: str | Path | None, overrides: list[str]) -> SweepConfig:
    """Load the sweep YAML with ``key=value`` overrides (``train.*`` keys reach every cell)."""
    data = load_mapping(path, overrides)
    train_keys = data.pop("train", {}) or {}
    if not isinstance(train_keys, dict):
        raise MtdnnError(f"found {train_keys!r} ({type(train_keys).__name__}), expected a "
                         "mapping of training keys", file=path, key="train",
                         allowed="a mapping, e.g. train: {epochs: 3, batch_size: 32}")
    starts = data.get("start_points")
    if isinstance(starts, dict):  # shorthand: `name: folder` or `name: null`
        data["start_points"] = {name: {"init": value} if value is None or isinstance(value, str)
                                else value for name, value in starts.items()}
    config = dataclasses.replace(build(SweepConfig, data, source=path), train=train_keys)
    for name, start in config.start_points.items():
        # Fail on a bad train key now, not in the tenth cell.
        config_from_dict({**merged(config.train, start.train), "tasks": {"x": {}}},
                         source=f"{path or 'command line'} (train + start_points.{name}.train)")
    return config


def subset_manifest(config: SweepConfig, task: str) -> dict[str, Any]:
    folder = Path(config.data_dir) / task / "subsets" / f"seed{config.subset_seed}"
    path = folder / "manifest.json"
    if not path.is_file():
        raise MtdnnError(f"no subsets of task '{task}'", file=path,
                         allowed=f"python -m data_prep subsets --data-dir {config.data_dir} "
                                 f"--task {task} --preset paper --seed {config.subset_seed}")
    manifest = read_json(path)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise MtdnnError("the manifest has no 'files' mapping", file=path,
                         allowed="a manifest written by python -m data_prep subsets")
    missing = [s for s in task_subsets(config, task) if s not in files]
    if missing:
        raise MtdnnError(f"subset '{missing[0]}' of task '{task}' was never drawn", file=path,
                         key="subsets", allowed=", ".join(files))
    entries = {name: {**files[name], "folder": folder} for name in task_subsets(config, task)}
    cap = config.max_train_rows
    for entry in entries.values():
        if cap is not None and entry["available"] and entry["size"] > cap:
            entry.update(available=False,
                         reason=f"not run: {entry['size']:,} rows > max_train_rows {cap:,}")
    return entries


def task_subsets(config: SweepConfig, task: str) -> tuple[str, ...]:
    """The subsets a task is swept over."""
    if isinstance(config.subsets, dict):
        if task not in config.subsets:
            raise MtdnnError(f"no subsets given for task '{task}'", key="subsets",
                             allowed=f"a list for every task: {', '.join(config.tasks)}")
        return tuple(config.subsets[task])
    return config.subsets


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` laid over it, nested mappings merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        both_maps = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both_maps else value
    return out


def cell_dir(config: SweepConfig, cell: Cell) -> Path:
    return (Path(config.output_dir) / cell.start / cell.task / cell.subset /
            f"seed{cell.seed}")


def start_fingerprints(config: SweepConfig) -> dict[str, str | None]:
    """Each start point's weights fingerprint (None for the plain encoder); a missing
    checkpoint is an error before any cell runs."""
    prints = {}
    for name, start in config.start_points.items():
        if start.init is not None and not Path(start.init).is_dir():
            raise MtdnnError(f"start point '{name}' not found", file=start.init,
                             key=f"start_points.{name}",
                             allowed="a checkpoint folder, or null for the plain encoder")
        prints[name] = None if start.init is None else weights_fingerprint(Path(start.init))
    return prints


# Keys that change how a run looks, not what it learns: a finished cell stays valid.
COSMETIC_TRAIN_KEYS = ("progress_bar", "cache_dir", "log_every_steps")


def cell_train_keys(config: SweepConfig, start: str) -> dict[str, Any]:
    """The training keys a cell of ``start`` runs with (the sweep's and its start point's)."""
    keys = merged(config.train, config.start_points[start].train)
    return {k: v for k, v in sorted(keys.items()) if k not in COSMETIC_TRAIN_KEYS}


def check_train_keys(config: SweepConfig, cell: Cell, result: dict[str, Any],
                     path: Path) -> None:
    """A finished cell trained with other keys (a changed budget or learning rate) is an
    error: its number would sit in the table next to cells it cannot be compared with."""
    saved, now = result.get("train_keys"), cell_train_keys(config, cell.start)
    if saved == now:
        return
    saved = saved or {}
    key = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))[0]
    raise MtdnnError(
        f"this finished cell was trained with train.{key}={saved.get(key)!r}, the sweep now "
        f"has {now.get(key)!r}", file=path, key=f"train.{key}",
        allowed="the training keys the finished cells ran with, or a new output_dir (or "
                "delete the finished cells to train them again)")


def is_finished(config: SweepConfig, cell: Cell, fingerprint: str | None) -> bool:
    """Whether the cell has its result. A result trained from other start weights (a
    re-trained stage-1 checkpoint) or with other training keys is an error rather than a
    silent mix in the table."""
    path = cell_dir(config, cell) / "result.json"
    if not path.is_file():
        return False
    result = read_json(path)
    check_train_keys(config, cell, result, path)
    saved = result.get("start_fingerprint")
    if saved != fingerprint:
        raise MtdnnError(
            f"this finished cell was trained from start weights {str(saved)[:12]}, but "
            f"start point '{cell.start}' now has weights {str(fingerprint)[:12]}", file=path,
            key=f"start_points.{cell.start}",
            allowed="the checkpoint the finished cells started from, or a new output_dir "
                    "(or delete the cells of this start point to train them again)")
    return True


@contextlib.contextmanager
def claimed(folder: Path) -> Iterator[bool]:
    """Claim a cell for this process (a ``.claim`` file holding its pid, created
    exclusively), so that several workers can share one grid; a claim whose process is
    gone is taken over. Yields whether this process holds the claim."""
    folder.mkdir(parents=True, exist_ok=True)
    claim = folder / ".claim"
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                os.kill(int(claim.read_text() or 0), 0)
            except (ProcessLookupError, ValueError):
                claim.unlink(missing_ok=True)  # its worker died: take it over
                continue
            except PermissionError:
                pass
            yield False
            return
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        try:
            yield True
        finally:
            claim.unlink(missing_ok=True)
        return
    yield False


SMART_TERMS = ("adv_ratio", "delta_linf", "adv_grad_cos", "bregman_ratio")


def logged_smart_terms(run_dir: Path) -> dict[str, dict[str, float]]:
    """Median and maximum over a run's log lines of each SMART term it logged: the
    evidence that a regulariser was active, and how strong it was next to the task loss."""
    entries = [json.loads(line) for line in
               (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    found = {}
    for name in SMART_TERMS:
        values = [e[name] for e in entries if e.get("kind") == "train" and name in e]
        if values:
            found[name] = {"median": float(np.median(values)), "max": float(np.max(values))}
    return found


def run_cell(config: SweepConfig, cell: Cell, subset: dict[str, Any],
             fingerprint: str | None) -> dict[str, Any]:
    """Fine-tune one cell (resuming it if it was interrupted); write its result.json."""
    folder = cell_dir(config, cell)
    start = config.start_points[cell.start]
    train_file = Path(subset["folder"]) / subset["file"]
    dev = config.dev.get(cell.task) or str(Path(config.data_dir) / cell.task / "dev.jsonl")
    keys = {**merged(config.train, start.train), "tasks": {cell.task: {
        "train": str(train_file), "dev": dev}},
        "data_dir": config.data_dir, "seed": cell.seed, "output_dir": str(folder),
        "init_checkpoint": start.init, **continue_keys(folder)}
    started = time.perf_counter()
    summary = train(config_from_dict(keys, source=f"sweep cell {folder}"))
    result = {"start_point": cell.start, "task": cell.task, "subset": cell.subset,
              "train_size": subset["size"], "seed": cell.seed, "start_fingerprint": fingerprint,
              "train_keys": cell_train_keys(config, cell.start), "dev_file": dev,
              "precision": summary["precision"], "steps": summary["steps"],
              "metrics": summary["last"]["metrics"][cell.task],
              "smart_terms": logged_smart_terms(folder),
              "wall_seconds": round(time.perf_counter() - started, 1)}
    atomic_write_json(folder / "result.json", result)
    return result


def run_sweep(config: SweepConfig) -> Path:
    """Run every missing cell, then write the results files; returns the results folder.
    Every finished cell is checked before anything is written."""
    manifests = {task: subset_manifest(config, task) for task in config.tasks}
    fingerprints = start_fingerprints(config)
    todo = []
    for task in config.tasks:
        for subset, entry in manifests[task].items():
            if not entry["available"]:
                log.info("%s %s: %s, skipped", task, subset, entry["reason"])
                continue
            todo += [(Cell(start, task, subset, seed), entry)
                     for start in config.start_points for seed in config.seeds
                     if not is_finished(config, Cell(start, task, subset, seed),
                                        fingerprints[start])]
    out = make_output_dir(Path(config.output_dir))
    atomic_write_json(out / "sweep_config.json", to_dict(config))
    for cell, entry in todo:
        with claimed(cell_dir(config, cell)) as mine:
            # another worker on the same grid runs it (or finished it meanwhile)
            if not mine or (cell_dir(config, cell) / "result.json").is_file():
                continue
            log.info("cell %s", cell)
            run_cell(config, cell, entry, fingerprints[cell.start])
    write_results(config, manifests)
    return out


def collect(config: SweepConfig) -> list[dict[str, Any]]:
    """The finished cells' results; one trained with other training keys is an error."""
    rows = []
    for start in config.start_points:
        for task in config.tasks:
            for subset in task_subsets(config, task):
                for seed in config.seeds:
                    cell = Cell(start, task, subset, seed)
                    path = cell_dir(config, cell) / "result.json"
                    if path.is_file():
                        rows.append(read_json(path))
                        check_train_keys(config, cell, rows[-1], path)
    return rows


def write_results(config: SweepConfig, manifests: dict[str, dict[str, Any]]) -> None:
    from mtdnn.plots import plot_sweep

    out = Path(config.output_dir)
    rows = collect(config)
    metric_names = sorted({m for row in rows for m in row["metrics"]})
    with atomic_path(out / "results.csv") as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["start_point", "task", "subset", "train_size", "seed",
                         *metric_names, "wall_seconds"])
        for row in rows:
            writer.writerow([row["start_point"], row["task"], row["subset"], row["train_size"],
                             row["seed"], *(row["metrics"].get(m, "") for m in metric_names),
                             row["wall_seconds"]])
    atomic_write_text(out / "results.md", results_table(config, manifests, rows))
    plot_sweep(rows, config.tasks, list(config.start_points), out / "results.png")


def task_block_heads(config: SweepConfig, task: str, lines: list[str]) -> tuple[str, ...]:
    """The task's subsets; with subsets per task, each task block gets its own table head
    (one table head for all tasks otherwise, as in Table 5)."""
    subsets = task_subsets(config, task)
    if isinstance(config.subsets, dict):
        lines += ([""] if lines and lines[-1] else []) + table_head(subsets)
    return subsets


def results_table(config: SweepConfig, manifests: dict[str, dict[str, Any]],
                  rows: list[dict[str, Any]]) -> str:
    """Table 5's layout: one block per task, a row of training-set sizes, then one row per
    start point with dev accuracy mean ± std over seeds (percent)."""
    per_task = isinstance(config.subsets, dict)
    lines = [] if per_task else table_head(config.subsets)
    for task in config.tasks:
        subsets = task_block_heads(config, task, lines)
        lines.append(f"| **{task} (dev accuracy %)** |" + " |" * len(subsets))
        sizes = [f"{manifests[task][s]['size']:,}" for s in subsets]
        lines.append("| #Training Data | " + " | ".join(sizes) + " |")
        for start in config.start_points:
            cells = []
            for subset in subsets:
                entry = manifests[task][subset]
                if not entry["available"]:
                    cells.append(f"n/a ({entry['reason']})")
                    continue
                cells.append(mean_std(dev_accuracies(rows, task, subset, start)))
            lines.append(f"| {start} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + differences_table(config, manifests, rows)


def differences_table(config: SweepConfig, manifests: dict[str, dict[str, Any]],
                      rows: list[dict[str, Any]]) -> str:
    """Each later start point minus each earlier one, in dev accuracy points, with Welch's
    t-test p over seeds: with 3 seeds a gap of a point can be noise, and the table says so."""
    starts = list(config.start_points)
    pairs = [(later, earlier) for i, earlier in enumerate(starts) for later in starts[i + 1:]]
    if not pairs:
        return ""
    per_task = isinstance(config.subsets, dict)
    lines = ["Differences (points of dev accuracy; Welch's t-test p over seeds):", ""]
    if not per_task:
        lines += table_head(config.subsets)
    for task in config.tasks:
        subsets = task_block_heads(config, task, lines)
        lines.append(f"| **{task}** |" + " |" * len(subsets))
        for later, earlier in pairs:
            cells = []
            for subset in subsets:
                if not manifests[task][subset]["available"]:
                    cells.append("n/a")
                    continue
                cells.append(difference(dev_accuracies(rows, task, subset, later),
                                        dev_accuracies(rows, task, subset, earlier)))
            lines.append(f"| {later} − {earlier} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def difference(a: list[float], b: list[float]) -> str:
    """``mean(a) − mean(b)`` with Welch's p; p needs two runs a side and some spread."""
    if not a or not b:
        return "not run"
    gap = f"{np.mean(a) - np.mean(b):+.1f}"
    if gap == "-0.0":  # a tiny negative gap rounds to a signed zero
        gap = "+0.0"
    if min(len(a), len(b)) < 2:
        return f"{gap} (no p: 1 seed)"
    if np.var(a) + np.var(b) == 0:
        return f"{gap} (no p: no spread)"
    from scipy import stats

    p = stats.ttest_ind(a, b, equal_var=False).pvalue
    return f"{gap} (p = {p:.3f})" if p >= 0.001 else f"{gap} (p < 0.001)"


def table_head(subsets: tuple[str, ...] | list[str]) -> list[str]:
    return ["| Model | " + " | ".join(subsets) + " |", "|---" * (len(subsets) + 1) + "|"]


def dev_accuracies(rows: list[dict[str, Any]], task: str, subset: str, start: str) -> list[float]:
    """One cell's dev accuracies over seeds, in percent."""
    return [100 * r["metrics"]["accuracy"] for r in rows
            if r["task"] == task and r["subset"] == subset and r["start_point"] == start]


def mean_std(values: list[float]) -> str:
    if not values:
        return "not run"
    if len(values) == 1:
        return f"{values[0]:.1f} (1 seed)"
    return f"{np.mean(values):.1f} ± {np.std(values, ddof=1):.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mtdnn.sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="sweep YAML (experiments/domain_adaptation.yaml)")
    parser.add_argument("--report-only", action="store_true",
                        help="write the results files from the finished cells; train nothing")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    config = load_sweep_config(args.config, args.overrides)
    if args.report_only:
        out = Path(config.output_dir)
        make_output_dir(out)
        write_results(config, {task: subset_manifest(config, task) for task in config.tasks})
    else:
        out = run_sweep(config)
    print((out / "results.md").read_text())
    print(f"{len(collect(config))} cells finished; "
          f"results: {out / 'results.csv'}, {out / 'results.md'}, {out / 'results.png'}")


if __name__ == "__main__":
    run_cli(main)
