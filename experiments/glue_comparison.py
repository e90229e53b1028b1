"""MT-DNN vs single-task fine-tuning vs Hugging Face Trainer on GLUE tasks (issue 3).

    python experiments/glue_comparison.py

1. One multi-task stage on RTE + MRPC + SST-2 (a seeded subset) + MNLI (its
   ``dev_matched`` file as training data, evaluated on ``dev_mismatched``), 6 layers.
2. For each task and seed: fine-tune from the shared checkpoint (``mt-dnn``), from the
   plain encoder in our engine (``single``) and with HF ``Trainer`` (``hf-trainer``), all
   with the same epochs, learning rate and batch size. The dev metric reported is the one
   after the last epoch (no selection on dev).

Every run is a subprocess of the project's own commands, printed before it starts. Each
finished run leaves a ``result.json`` (metrics, the command, and for ``mt-dnn`` the stage-1
weights' fingerprint); a run that has one is skipped, so the script resumes where it
stopped, in this session or a later one (``results/`` keeps only those files in git). The
stage is trained only while an ``mt-dnn`` run still needs it; it is deterministic on CPU,
and a rebuilt stage whose weights differ from the ones finished runs started from is an
error. Results go to ``<out>/results.csv`` and ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mtdnn.checkpoint import (
    continue_keys,  # noqa: E402
    weights_fingerprint,  # noqa: E402
)
from mtdnn.errors import MtdnnError, run_cli  # noqa: E402
from mtdnn.files import atomic_write_json  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FINETUNE_TASKS = ("rte", "mrpc", "sst2", "mnli")
ARMS = ("mt-dnn", "single", "hf-trainer")
STAGE1_SEED = 13


def run(command: list[str], log: Path) -> None:
    print("$", shlex.join(command), flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        subprocess.run(command, cwd=REPO, check=True, stdout=handle, stderr=subprocess.STDOUT)


def prepare(args: argparse.Namespace) -> Path:
    data = args.data_dir
    if not (data / "manifest.json").is_file():
        run([sys.executable, "-m", "data_prep", "all", "--raw-dir", str(args.raw_dir),
             "--out-dir", str(data)], args.out / "logs" / "data_prep.log")
    subset = data / "sst2" / "subsets" / "seed13" / f"n{args.sst2_size}.jsonl"
    if not subset.is_file():
        run([sys.executable, "-m", "data_prep", "subsets", "--data-dir", str(data), "--task",
             "sst2", "--count", str(args.sst2_size), "--seed", "13"],
            args.out / "logs" / "subsets.log")
    return subset


def continue_run(folder: Path) -> list[str]:
    """Resume an interrupted run from its last checkpoint; replace one that never saved."""
    return [f"{key}={str(value).lower() if isinstance(value, bool) else value}"
            for key, value in continue_keys(folder).items()]


def task_files(task: str, args: argparse.Namespace, sst2_train: Path) -> tuple[Path, Path]:
    """(train, dev) of a task: MNLI has no training split here, so dev_matched trains and
    dev_mismatched evaluates; SST-2 trains on its seeded subset."""
    folder = args.data_dir / task
    if task == "mnli":
        return folder / "dev_matched.jsonl", folder / "dev_mismatched.jsonl"
    return (sst2_train if task == "sst2" else folder / "train.jsonl"), folder / "dev.jsonl"


def train_cmd(tasks: list[str], args: argparse.Namespace, sst2_train: Path,
              overrides: list[str]) -> list[str]:
    # tasks=[...] replaces the whole tasks mapping, so it comes before per-task file keys.
    files = []
    for task in tasks:
        train, dev = task_files(task, args, sst2_train)
        if task in ("sst2", "mnli"):
            files.append(f"tasks.{task}.train={train}")
        if task == "mnli":
            files.append(f"tasks.{task}.dev={dev}")
    return [sys.executable, "train.py", f"tasks=[{','.join(tasks)}]", *files,
            f"data_dir={args.data_dir}", f"optimizer.lr={args.lr}",
            f"batch_size={args.batch_size}", "progress_bar=false", *overrides]


def stage1_checkpoint(args: argparse.Namespace, sst2_train: Path) -> tuple[Path, str]:
    """The shared checkpoint, trained if this machine lacks it, and its weights' fingerprint.

    A later session keeps only the stage's ``result.json``: the stage is rebuilt (CPU runs
    are deterministic) and must come out with the weights the finished runs started from.
    """
    stage1 = args.out / "stage1" / f"seed{STAGE1_SEED}"
    record = stage1 / "result.json"
    kept = json.loads(record.read_text()) if record.is_file() else None
    command = train_cmd(list(FINETUNE_TASKS), args, sst2_train, [
        f"epochs={args.mt_epochs}", f"seed={STAGE1_SEED}", f"output_dir={stage1}"])
    if not ((stage1 / "summary.json").is_file() and (stage1 / "last").is_dir()):
        run(command + continue_run(stage1), args.out / "logs" / "stage1.log")
    fingerprint = weights_fingerprint(stage1 / "last")
    if kept is None:
        summary = json.loads((stage1 / "summary.json").read_text())
        kept = {"metrics": summary["last"]["metrics"], "steps": summary["steps"],
                "weights_fingerprint": fingerprint,
                "command": shlex.join(["python", *command[1:]])}
    atomic_write_json(record, kept)  # rewritten if a rebuild's overwrite removed it
    if fingerprint != kept["weights_fingerprint"]:
        raise MtdnnError(f"the rebuilt stage 1 has weights {fingerprint[:12]}, but the finished "
                         f"runs started from {kept['weights_fingerprint'][:12]}",
                         file=record, allowed=f"the same stage 1 (or move {args.out} aside "
                                              "to start over)")
    return stage1 / "last", fingerprint


def record_result(folder: Path, task: str, seed: int, command: list[str],
                  start_fingerprint: str | None) -> None:
    """One ``result.json`` per run whatever ran it: the last epoch's dev metrics."""
    if (folder / "result.json").is_file():  # hf_baseline.py writes its own
        result = json.loads((folder / "result.json").read_text())
    else:
        summary = json.loads((folder / "summary.json").read_text())
        result = {"task": task, "seed": seed, "metrics": summary["last"]["metrics"][task],
                  "steps": summary["steps"], "train_seconds": summary["train_seconds"],
                  "train_examples_per_s": summary["train_examples_per_s"]}
    # The interpreter as "python": records are read on other machines.
    result.update(command=shlex.join(["python", *command[1:]]),
                  start_fingerprint=start_fingerprint)
    atomic_write_json(folder / "result.json", result)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/glue_comparison"))
    parser.add_argument("--raw-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[13, 14, 15])
    parser.add_argument("--epochs", type=int, default=2, help="fine-tuning epochs")
    parser.add_argument("--mt-epochs", type=int, default=1, help="multi-task stage epochs")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sst2-size", type=int, default=2000)
    parser.add_argument("--tasks", nargs="+", choices=FINETUNE_TASKS, default=FINETUNE_TASKS,
                        help="fine-tune only these (split --tasks, --seeds or --arms across "
                             "instances to use two machines or cores)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=ARMS)
    parser.add_argument("--report-only", action="store_true",
                        help="write results.csv/.md from the runs finished so far; train nothing")
    args = parser.parse_args(argv)
    if args.report_only:
        if not args.out.is_dir():
            raise MtdnnError("no comparison here to report", file=args.out,
                             allowed="the --out folder of an earlier run")
        write_results(args)
        return
    sst2_train = prepare(args)
    runs = [(task, seed, arm) for task in args.tasks for seed in args.seeds for arm in args.arms
            if not (args.out / arm / task / f"seed{seed}" / "result.json").is_file()]
    stage1, fingerprint = (stage1_checkpoint(args, sst2_train)
                           if any(arm == "mt-dnn" for _, _, arm in runs) else (None, None))
    for task, seed, arm in runs:
        folder = args.out / arm / task / f"seed{seed}"
        if arm == "hf-trainer":
            train, dev = task_files(task, args, sst2_train)
            command = [sys.executable, "experiments/hf_baseline.py", "--task", task,
                       "--train", str(train), "--dev", str(dev), "--out", str(folder),
                       "--epochs", str(args.epochs), "--lr", str(args.lr),
                       "--batch-size", str(args.batch_size), "--seed", str(seed)]
        else:
            init = [f"init_checkpoint={stage1}"] if arm == "mt-dnn" else []
            command = train_cmd([task], args, sst2_train, [
                *init, f"seed={seed}", f"epochs={args.epochs}", f"output_dir={folder}"])
        started = time.time()
        # A run of ours with a summary finished and only lost its record (a stopped script).
        if arm == "hf-trainer" or not (folder / "summary.json").is_file():
            run(command + (continue_run(folder) if arm != "hf-trainer" else []),
                args.out / "logs" / f"{arm}-{task}-seed{seed}.log")
        record_result(folder, task, seed, command, fingerprint if arm == "mt-dnn" else None)
        print(f"  done in {time.time() - started:.0f}s", flush=True)
    write_results(args)


def collect(args: argparse.Namespace) -> list[dict]:
    rows = []
    stage1 = args.out / "stage1" / f"seed{STAGE1_SEED}" / "result.json"
    if stage1.is_file():
        for task, metrics in json.loads(stage1.read_text())["metrics"].items():
            rows.append({"arm": "mt-dnn stage 1 (no fine-tuning)", "task": task,
                         "seed": STAGE1_SEED, **metrics})
    # Every finished run on disk, not only this invocation's --seeds: a worker given one seed
    # rewrites the shared report, which must still hold the other workers' runs.
    for arm in ARMS:
        for task in FINETUNE_TASKS:
            done = sorted((args.out / arm / task).glob("seed*/result.json"),
                          key=lambda path: int(path.parent.name.removeprefix("seed")))
            for record in done:  # a cell says how many seeds it has so far
                seed = int(record.parent.name.removeprefix("seed"))
                metrics = json.loads(record.read_text())["metrics"]
                rows.append({"arm": arm, "task": task, "seed": seed, **metrics})
    return rows


def _cell(values: list[float], arm: str) -> str:
    if not values:
        return "—"
    if arm.startswith("mt-dnn stage 1"):
        return f"{values[0]:.1f}"
    spread = f" ± {np.std(values, ddof=1):.1f}" if len(values) > 1 else ""
    return f"{np.mean(values):.1f}{spread} (n={len(values)})"


def write_results(args: argparse.Namespace) -> None:
    rows = collect(args)
    fields = ["arm", "task", "seed", "accuracy", "f1"]
    with open(args.out / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    columns = [("rte", "accuracy"), ("mrpc", "accuracy"), ("mrpc", "f1"), ("sst2", "accuracy"),
               ("mnli", "accuracy")]
    lines = ["| start point | " + " | ".join(f"{t.upper()} {m}" for t, m in columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for arm in ["mt-dnn stage 1 (no fine-tuning)", *ARMS]:
        cells = []
        for task, metric in columns:
            values = [100 * r[metric] for r in rows if r["arm"] == arm and r["task"] == task
                      and metric in r]
            cells.append(_cell(values, arm))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    run_cli(main)
