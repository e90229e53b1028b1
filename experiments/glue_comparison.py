"""MT-DNN vs single-task fine-tuning vs Hugging Face Trainer on GLUE tasks (issue 3).

    python experiments/glue_comparison.py --out runs/glue_comparison

1. One multi-task stage on RTE + MRPC + SST-2 (a seeded subset) + MNLI (its
   ``dev_matched`` file as training data, evaluated on ``dev_mismatched``), 6 layers.
2. For each small task and seed: fine-tune from the shared checkpoint (``mt-dnn``), from
   the plain encoder in our engine (``single``) and with HF ``Trainer`` (``hf-trainer``),
   all with the same epochs, learning rate and batch size. The dev metric reported is the
   one after the last epoch (no selection on dev).

Every run is a subprocess of the project's own commands, printed before it starts. A run
whose result file exists is skipped, so the script resumes where it stopped. Results go to
``<out>/results.csv`` and ``<out>/results.md``.
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
from mtdnn.run_state import continue_keys  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FINETUNE_TASKS = ("rte", "mrpc", "sst2")
ARMS = ("mt-dnn", "single", "hf-trainer")


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


def train_cmd(tasks: str, args: argparse.Namespace, sst2_train: Path,
              overrides: list[str]) -> list[str]:
    # tasks=[...] replaces the whole tasks mapping, so it comes before per-task file keys.
    sst2 = [f"tasks.sst2.train={sst2_train}"] if "sst2" in tasks else []
    return [sys.executable, "train.py", f"tasks=[{tasks}]", *sst2, f"data_dir={args.data_dir}",
            f"optimizer.lr={args.lr}", f"batch_size={args.batch_size}", "progress_bar=false",
            *overrides]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/glue_comparison"))
    parser.add_argument("--raw-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[13, 14, 15])
    parser.add_argument("--epochs", type=int, default=2, help="fine-tuning epochs")
    parser.add_argument("--mt-epochs", type=int, default=1, help="multi-task stage epochs")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sst2-size", type=int, default=2000)
    parser.add_argument("--tasks", nargs="+", choices=FINETUNE_TASKS, default=FINETUNE_TASKS,
                        help="fine-tune only these (run two instances on different tasks to "
                             "use two machines or cores)")
    parser.add_argument("--report-only", action="store_true",
                        help="write results.csv/.md from the runs finished so far; train nothing")
    args = parser.parse_args()
    if args.report_only:
        write_results(args)
        return
    sst2_train = prepare(args)

    stage1 = args.out / "stage1"
    if not (stage1 / "summary.json").is_file():
        run(train_cmd("rte,mrpc,sst2,mnli", args, sst2_train, [
                       f"tasks.mnli.train={args.data_dir / 'mnli' / 'dev_matched.jsonl'}",
                       f"tasks.mnli.dev={args.data_dir / 'mnli' / 'dev_mismatched.jsonl'}",
                       f"epochs={args.mt_epochs}", "seed=13", f"output_dir={stage1}",
                       *continue_run(stage1)]),
            args.out / "logs" / "stage1.log")

    for task in args.tasks:
        train_file = sst2_train if task == "sst2" else args.data_dir / task / "train.jsonl"
        for seed in args.seeds:
            for arm in ARMS:
                folder = args.out / arm / task / f"seed{seed}"
                result = folder / ("result.json" if arm == "hf-trainer" else "summary.json")
                if result.is_file():
                    continue
                if arm == "hf-trainer":
                    command = [sys.executable, "experiments/hf_baseline.py", "--task", task,
                               "--train", str(train_file), "--dev",
                               str(args.data_dir / task / "dev.jsonl"), "--out", str(folder),
                               "--epochs", str(args.epochs), "--lr", str(args.lr),
                               "--batch-size", str(args.batch_size), "--seed", str(seed)]
                else:
                    init = [f"init_checkpoint={stage1 / 'last'}"] if arm == "mt-dnn" else []
                    command = train_cmd(task, args, sst2_train, [
                        *init, f"seed={seed}", f"epochs={args.epochs}", f"output_dir={folder}",
                        *continue_run(folder)])
                started = time.time()
                run(command, args.out / "logs" / f"{arm}-{task}-seed{seed}.log")
                print(f"  done in {time.time() - started:.0f}s", flush=True)
    write_results(args)


def collect(args: argparse.Namespace) -> list[dict]:
    rows = []
    stage1 = json.loads((args.out / "stage1" / "summary.json").read_text())
    for task, metrics in stage1["last"]["metrics"].items():
        rows.append({"arm": "mt-dnn stage 1 (no fine-tuning)", "task": task, "seed": 13,
                     **metrics})
    for arm in ARMS:
        for task in FINETUNE_TASKS:
            for seed in args.seeds:
                folder = args.out / arm / task / f"seed{seed}"
                done = folder / ("result.json" if arm == "hf-trainer" else "summary.json")
                if not done.is_file():
                    continue  # not run yet: the table says how many seeds each cell has
                if arm == "hf-trainer":
                    metrics = json.loads(done.read_text())["metrics"]
                else:
                    metrics = json.loads(done.read_text())["last"]["metrics"][task]
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
    main()
