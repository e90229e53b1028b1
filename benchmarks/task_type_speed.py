"""Training throughput of the token and span types: our loop against Hugging Face
``Trainer`` with its token-classification and question-answering recipes.

    python benchmarks/task_type_speed.py [--steps 8] [--batch-size 32] [--layers 6]

CoNLL-2003 train sentences (max length 128) and SQuAD questions (max length 256, stride
64; this data has no SQuAD train split, so its dev questions are the rows: only speed is
measured), the packaged encoder, bf16 on both sides (fp32 where the CPU has no bf16), the
same number of optimizer steps. A feature is what a batch row is: a sentence, or one
window of a context (a long context gives several). Features/s count training only, each
measurement in its own process, the two sides one after the other in one run.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import train_speed
from common import THREADS, Row, bench_main, in_fresh_process
from train_speed import small_dev, train_ours

# task: (train rows, max length)
TASKS = {"conll2003": ("conll2003/train.jsonl", 128), "squad": ("squad/dev.jsonl", 256)}


def ours(task: str, args: argparse.Namespace) -> dict:
    rows, length = TASKS[task]
    summary = train_ours([task], args, "run", [
        f"tasks.{task}.train={args.data_dir / rows}", f"max_seq_len={length}",
        "precision=auto"])
    return {"features_per_s": summary["train_examples_per_s"], "steps": summary["steps"],
            "precision": summary["precision"]}


def trainer(task: str, args: argparse.Namespace) -> dict:
    import torch

    from mtdnn.modeling.precision import resolve_precision
    from mtdnn.training.hf_trainer import finetune

    torch.set_num_threads(THREADS)
    rows, length = TASKS[task]
    precision = resolve_precision("auto", torch.device("cpu"))
    result = finetune(task, args.data_dir / rows, small_dev(args.data_dir, task, args.work),
                      args.work / "hf", epochs=1, lr=5e-5, batch_size=args.batch_size,
                      seed=13, max_seq_len=length, max_steps=args.steps, layers=args.layers,
                      bf16=precision == "bf16")
    return {"features_per_s": result["train_examples_per_s"], "steps": result["steps"],
            "precision": precision}


def child(args: argparse.Namespace) -> dict:
    side, task = args.child.split(":")
    return ours(task, args) if side == "ours" else trainer(task, args)


def run(args: argparse.Namespace) -> list[Row]:
    work = Path(tempfile.mkdtemp(prefix="bench_task_types_"))
    speeds = {}
    try:
        print(f"Token and span training throughput (features/s; higher is better): "
              f"{args.layers}-layer packaged encoder, batch {args.batch_size}, "
              f"{args.steps} steps")
        for task in TASKS:
            for side in ("ours", "trainer"):
                result = in_fresh_process(
                    Path(__file__), f"{side}:{task}", "--steps", str(args.steps),
                    "--batch-size", str(args.batch_size), "--layers", str(args.layers),
                    "--data-dir", str(args.data_dir), "--work", str(work))
                speeds[side, task] = result["features_per_s"]
                print(f"  {side} {task} ({result['precision']}, {result['steps']} steps): "
                      f"{result['features_per_s']:.2f} features/s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [Row("training", f"{task} ({'span' if task == 'squad' else 'token'} type), "
                "features/s", speeds["ours", task], speeds["trainer", task],
                "Trainer, its recipe for the type", "feat/s", True, 0.9) for task in TASKS]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``train_speed``'s size flags; fewer steps, each a longer one."""
    train_speed.add_arguments(parser)
    parser.set_defaults(steps=8)


def main() -> None:
    bench_main(__doc__, add_arguments, run, child)


if __name__ == "__main__":
    main()
