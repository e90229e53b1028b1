"""Compare training recipes ("arms") over seeds: one training run per arm and seed.

    python -m mtdnn.compare --config experiments/sampling_comparison.yaml [key=value ...]
    python -m mtdnn.compare --config ... --report-only   # tables from finished runs only

Every run starts from the config's ``train`` keys with its arm's keys laid over them (for
instance ``sampler: {kind: smart}`` or ``pcgrad: true``) and its seed. A finished run (its
``result.json`` exists) is skipped and an interrupted one resumes from its last
checkpoint, so a comparison can run in several parts. Writes ``results.csv`` (one row per
run and task: dev metrics after the last step, wall time) and ``results.md`` (arms × task
metrics, mean ± std over seeds).
"""

from __future__ import annotations

import argparse
import csv
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtdnn.checkpoint import continue_keys
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
from mtdnn.sweep import mean_std, merged
from mtdnn.trainer import train

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompareConfig:
    """Arms (name → training keys of their own) × seeds, on a shared training config."""

    arms: dict[str, Any]
    seeds: tuple[int, ...] = (13, 14)
    output_dir: str = "runs/compare"
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig keys for every run


def load_compare_config(path: str | Path | None, overrides: list[str]) -> CompareConfig:
    data = load_mapping(path, overrides)
    config = build(CompareConfig, data, source=path)
    for name, keys in config.arms.items():
        if not isinstance(keys, dict):
            raise MtdnnError(f"arm '{name}' is {keys!r}", file=path, key=f"arms.{name}",
                             allowed="a mapping of training keys, e.g. {pcgrad: true}, or {}")
        # Fail on a bad key now, not in the fifth run.
        config_from_dict(merged(config.train, keys),
                         source=f"{path or 'command line'} (train + arms.{name})")
    if not config.arms:
        raise MtdnnError("no arms given", file=path, key="arms",
                         allowed="a mapping of arm name → training keys")
    return config


def run_dir(config: CompareConfig, arm: str, seed: int) -> Path:
    return Path(config.output_dir) / arm / f"seed{seed}"


def run_compare(config: CompareConfig) -> Path:
    """Run every missing (arm, seed), then write the results; returns the results folder."""
    out = Path(config.output_dir)
    make_output_dir(out)
    atomic_write_json(out / "compare_config.json", to_dict(config))
    for seed in config.seeds:  # seed-major: a partial comparison has every arm once
        for arm, keys in config.arms.items():
            folder = run_dir(config, arm, seed)
            if (folder / "result.json").is_file():
                continue
            log.info("run %s seed %d", arm, seed)
            started = time.perf_counter()
            summary = train(config_from_dict({
                **merged(config.train, keys), "seed": seed, "output_dir": str(folder),
                **continue_keys(folder)}, source=f"compare run {folder}"))
            atomic_write_json(folder / "result.json", {
                "arm": arm, "seed": seed, "steps": summary["steps"],
                "metrics": summary["last"]["metrics"],
                "train_examples_per_s": summary["train_examples_per_s"],
                "wall_seconds": round(time.perf_counter() - started, 1)})
    write_results(config)
    return out


def collect(config: CompareConfig) -> list[dict[str, Any]]:
    return [read_json(path) for arm in config.arms for seed in config.seeds
            if (path := run_dir(config, arm, seed) / "result.json").is_file()]


def write_results(config: CompareConfig) -> None:
    out = Path(config.output_dir)
    results = collect(config)
    columns = sorted({(task, metric) for r in results for task, values in r["metrics"].items()
                      for metric in values})
    with atomic_path(out / "results.csv") as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["arm", "seed", "task", "metric", "value", "steps", "wall_seconds"])
        for r in results:
            for task, metric in columns:
                if metric in r["metrics"].get(task, {}):
                    writer.writerow([r["arm"], r["seed"], task, metric,
                                     r["metrics"][task][metric], r["steps"], r["wall_seconds"]])
    atomic_write_text(out / "results.md", results_table(config, results, columns))


def results_table(config: CompareConfig, results: list[dict[str, Any]],
                  columns: list[tuple[str, str]]) -> str:
    """Arms × (task, metric), dev metrics in percent, mean ± std over seeds."""
    lines = ["| arm | " + " | ".join(f"{t} {m}" for t, m in columns) + " | mean |",
             "|---" * (len(columns) + 2) + "|"]
    for arm in config.arms:
        mine = [r for r in results if r["arm"] == arm]
        cells = [mean_std([100 * r["metrics"][t][m] for r in mine if m in r["metrics"].get(t, {})])
                 for t, m in columns]
        per_run = [100 * sum(r["metrics"][t][m] for t, m in columns) / len(columns)
                   for r in mine if all(m in r["metrics"].get(t, {}) for t, m in columns)]
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {mean_std(per_run)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mtdnn.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="comparison YAML")
    parser.add_argument("--report-only", action="store_true",
                        help="write the results files from the finished runs; train nothing")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    config = load_compare_config(args.config, args.overrides)
    if args.report_only:
        out = Path(config.output_dir)
        make_output_dir(out)
        write_results(config)
    else:
        out = run_compare(config)
    print((out / "results.md").read_text())
    print(f"{len(collect(config))} of {len(config.arms) * len(config.seeds)} runs finished; "
          f"results: {out / 'results.csv'}, {out / 'results.md'}")


if __name__ == "__main__":
    run_cli(main)
