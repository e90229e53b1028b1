"""Migrate committed result records in place to the experiment runner's format; re-runs nothing.

    python scripts/migrate_records.py [experiments/*.yaml ...]

For each experiment config with a ``publish_dir``, the records under it are rewritten as
:mod:`mtdnn.experiment` writes them, and moved to its run folders
(``<arm>/<task>/<subset>/seed<s>[-stage<t>]``):

1. ``command``: the interpreter's absolute path becomes ``python`` (records are read on
   other machines).
2. Records of ``mtdnn.sweep`` (``start_point``): ``arm``; ``metrics`` keyed by task.
3. Records of ``mtdnn.compare`` (``arm``, no ``task``): one multi-task run each
   (``<arm>/multitask/full/seed<s>``); their training keys, which compare did not record,
   are the config's.
4. Records of ``experiments/glue_comparison.py`` (``command``, flat metrics): the keys in
   the recorded command must equal the config's (else the record is left and reported);
   the stage-1 record becomes ``stages/mt-dnn/seed13``.
5. A stage's record that only its runs knew (domain adaptation's start points): the
   weights fingerprint its runs recorded, the metrics of the stage's own record.
6. Runs that predate bf16 ran in fp32 (``auto`` meant fp32 on a CPU); where the config now
   says ``precision: fp32`` so that a missing run runs as they did, their training keys say
   so too.

Every rewrite is atomic and idempotent: a second run changes nothing.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from mtdnn.experiment.config import (
    FULL,
    MULTITASK,
    ExperimentConfig,
    arm_train_keys,
    flat,
    load_experiment,
    stage_of,
    stage_train_keys,
)
from mtdnn.experiment.grid import Cell, subset_sizes, task_file
from mtdnn.experiment.records import RECORD
from mtdnn.files import atomic_write_json, read_json


def portable_command(command: str) -> str:
    """The command with its interpreter written as ``python``."""
    words = shlex.split(command)
    if words and Path(words[0]).name.startswith("python"):
        words[0] = "python"
    return shlex.join(words)


def command_keys(command: str) -> dict[str, str]:
    """The training keys a recorded command set: ``key=value`` words of train.py and the
    ``--epochs/--lr/--batch-size`` flags of the Trainer baseline, as strings."""
    words = shlex.split(command)
    keys = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    flags = {"--epochs": "epochs", "--lr": "optimizer.lr", "--batch-size": "batch_size"}
    keys.update({flags[w]: words[i + 1] for i, w in enumerate(words) if w in flags})
    return keys


def agrees(command: str, keys: dict[str, Any]) -> list[str]:
    """Training keys whose recorded value differs from the config's."""
    recorded = command_keys(command)
    return [k for k, v in flat(keys).items() if k in recorded and k != "tasks"
            and str(recorded[k]) != str(v) and not _same_number(recorded[k], v)]


def _same_number(a: str, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


def with_precision(keys: dict[str, Any], config_keys: dict[str, Any],
                   record: dict[str, Any]) -> dict[str, Any]:
    """Item 6: the fp32 a pre-bf16 run ran with, where the config now pins it."""
    if (config_keys.get("precision") == "fp32" and "precision" not in keys
            and record.get("precision") in (None, "fp32")):
        return {**keys, "precision": "fp32"}
    return keys


def place(out: Path, old: Path, new: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` at ``new``; remove ``old`` and its emptied folders if it moved."""
    atomic_write_json(new, record)
    if old != new:
        old.unlink()
        for parent in old.parents:
            if parent == out or any(parent.iterdir()):
                break
            parent.rmdir()
    return new


def migrate_record(config: ExperimentConfig, out: Path, path: Path,
                   sizes: dict[str, dict[str, dict[str, Any]]]) -> Path | None:
    """Rewrite one record; return its new path if anything changed."""
    record = read_json(path)
    original = json.dumps(record, sort_keys=True)
    if isinstance(record.get("command"), str):
        record["command"] = portable_command(record["command"])
    relative = path.parent.relative_to(out)
    if relative.parts[0] in ("stage1", "stages"):
        return migrate_stage(config, out, path, record, original)
    if "start_point" in record:  # mtdnn.sweep
        record["arm"] = record.pop("start_point")
    arm = record.get("arm") or relative.parts[0]
    if arm not in config.arms:
        raise SystemExit(f"{path}: arm '{arm}' is not in the config")
    if "task" not in record:  # mtdnn.compare: one multi-task run
        record.update(task=MULTITASK, subset=FULL, start_fingerprint=None,
                      train_keys=arm_train_keys(config, arm))
    task = record["task"]
    if "subset" not in record:  # glue_comparison: one subset per task
        record["subset"] = sizes[task] and next(iter(sizes[task]))
    if task != MULTITASK and not isinstance(next(iter(record["metrics"].values())), dict):
        record["metrics"] = {task: record["metrics"]}
    stage = stage_of(config, arm)
    if stage is not None and "stage_seed" not in record:
        record["stage_seed"] = config.stages[stage].seeds[0]
    now = arm_train_keys(config, arm)
    if "train_keys" not in record:  # glue_comparison recorded its command instead
        wrong = agrees(record["command"], now)
        if wrong:
            raise SystemExit(f"{path}: its command set {wrong[0]} unlike the config")
        record["train_keys"] = {k: v for k, v in now.items() if k != "precision"}
    record["train_keys"] = with_precision(record["train_keys"], now, record)
    record.setdefault("arm", arm)
    record.setdefault("backend", config.arms[arm].backend)
    record.setdefault("train_size", sizes[task][record["subset"]]["size"])
    if task != MULTITASK:
        record.setdefault("dev_file", task_file(config, task, "dev"))
    if record.get("precision") is None and record["train_keys"].get("precision") == "fp32":
        record["precision"] = "fp32"
    cell = Cell(arm, task, record["subset"], record["seed"], record.get("stage_seed"))
    new = out / cell.folder / RECORD
    if json.dumps(record, sort_keys=True) == original and path == new:
        return None
    return place(out, path, new, record)


def migrate_stage(config: ExperimentConfig, out: Path, path: Path, record: dict[str, Any],
                  original: str) -> Path | None:
    name = path.parent.parent.name
    if name == "stage1":  # glue_comparison's one stage
        name = next(iter(config.stages), name)
    if name not in config.stages:
        raise SystemExit(f"{path}: no stage '{name}' in the config")
    keys = stage_train_keys(config, name)
    if "train_keys" not in record:
        wrong = agrees(record["command"], keys)
        if wrong:
            raise SystemExit(f"{path}: its command set {wrong[0]} unlike the stage's config")
        record["train_keys"] = keys
    seed = int(path.parent.name.removeprefix("seed"))
    record.setdefault("stage", name)
    record.setdefault("seed", seed)
    record.setdefault("precision", "fp32")
    new = out / "stages" / name / f"seed{seed}" / RECORD
    if json.dumps(record, sort_keys=True) == original and path == new:
        return None
    return place(out, path, new, record)


def missing_stage_records(config: ExperimentConfig, out: Path,
                          known: dict[str, Path]) -> list[Path]:
    """Item 5: a stage record built from its runs' fingerprint and the stage's own record
    (``known``: stage name -> a record or summary of the same training run)."""
    written = []
    for name, stage in config.stages.items():
        for seed in stage.seeds:
            target = out / "stages" / name / f"seed{seed}" / RECORD
            if target.is_file() or name not in known:
                continue
            prints = {read_json(p).get("start_fingerprint")
                      for p in out.glob(f"*/*/*/seed*-stage{seed}/{RECORD}")
                      if stage_of(config, p.parents[3].name) == name}
            if len(prints) != 1:
                continue
            source = read_json(known[name])
            atomic_write_json(target, {
                "stage": name, "seed": seed, "weights_fingerprint": prints.pop(),
                "train_keys": stage_train_keys(config, name), "precision": "fp32",
                "steps": source["steps"], "metrics": source["metrics"] if "metrics" in source
                else source["last"]["metrics"], "from": str(known[name])})
            written.append(target)
    return written


def migrate(config_path: Path) -> list[Path]:
    """Migrate the published records of one experiment config; return those changed."""
    config = load_experiment(config_path, [])
    if not config.publish_dir or not Path(config.publish_dir).is_dir():
        return []
    out = Path(config.publish_dir)
    sizes = {task: subset_sizes(config, task) for task in config.tasks or (MULTITASK,)}
    changed = [p for path in sorted(out.rglob(RECORD))
               if (p := migrate_record(config, out, path, sizes)) is not None]
    known = {"mt-dnn": Path("results/glue_comparison/stages/mt-dnn/seed13/result.json"),
             "mt-dnn-smart": Path("results/mtdnn_smart_glue/summary.json")}
    known = {k: v for k, v in known.items() if v.is_file()}
    changed += missing_stage_records(config, out, known)
    for old in ("sweep_config.json", "compare_config.json"):
        if (out / old).is_file():
            (out / old).unlink()
            changed.append(out / old)
    return changed


def main() -> None:
    configs = [Path(a) for a in sys.argv[1:]] or sorted(Path("experiments").glob("*.yaml"))
    # The GLUE comparison first: its stage record is the domain adaptation's source.
    configs.sort(key=lambda p: p.name != "glue_comparison.yaml")
    for config in configs:
        changed = migrate(config)
        print(f"{config}: {len(changed)} records rewritten")


if __name__ == "__main__":
    main()
