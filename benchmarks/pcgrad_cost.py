"""PCGrad's cost, measured side by side: step time and peak memory of the same multi-task
steps with PCGrad on and off.

    python benchmarks/pcgrad_cost.py [--steps 8] [--rounds 1] [--batch-size 16] [--layers 6]

The mix of issue 7's schedule comparison (RTE + MRPC + SST-2 2,000 + SciTail 10%) under the
``smart`` round-robin schedule, so most steps hold several tasks. Each variant runs our
training loop in its own process (peak RSS is its own), in turn, for several rounds; step
time is the median over rounds of the loop's own ``train_seconds / steps`` (loading,
evaluation and checkpoints excluded). Ratios are PCGrad ÷ summed gradients (lower is
better; no target: the cost is documented, not capped).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
from pathlib import Path

from common import REPO, Row, bench_main, in_fresh_process
from train_speed import train_ours

VARIANTS = ("summed", "pcgrad")
TRAIN_FILES = {"rte": "rte/train.jsonl", "mrpc": "mrpc/train.jsonl",
               "sst2": "sst2/subsets/seed13/n2000.jsonl",
               "scitail": "scitail/subsets/seed13/10pct.jsonl"}


def measure(variant: str, args: argparse.Namespace) -> dict:
    summary = train_ours(list(TRAIN_FILES), args, variant, [
        *[f"tasks.{t}.train={args.data_dir / f}" for t, f in TRAIN_FILES.items()],
        "sampler.kind=stochastic_round_robin", f"pcgrad={str(variant == 'pcgrad').lower()}"])
    return {"step_s": summary["train_seconds"] / summary["steps"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run(args: argparse.Namespace) -> list[Row]:
    print(f"PCGrad cost: {args.layers}-layer packaged encoder, batch {args.batch_size} per task, "
          f"{', '.join(TRAIN_FILES)} under the smart round-robin schedule, {args.steps} steps × "
          f"{args.rounds} rounds; peak memory = peak RSS of the variant's own process")
    work = Path(tempfile.mkdtemp(prefix="bench_pcgrad_"))
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    try:
        for _ in range(args.rounds):
            for variant in VARIANTS:
                results[variant].append(in_fresh_process(
                    Path(__file__), variant, "--steps", str(args.steps), "--batch-size",
                    str(args.batch_size), "--layers", str(args.layers), "--data-dir",
                    str(args.data_dir), "--work", str(work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    step = {v: statistics.median(r["step_s"] for r in runs) for v, runs in results.items()}
    peak = {v: max(r["peak_rss_mb"] for r in runs) for v, runs in results.items()}
    print("| variant | step time (s) | ÷ summed | peak RSS (MB) | ÷ summed |")
    print("|---|---|---|---|---|")
    for v in VARIANTS:
        print(f"| {v} | {step[v]:.3f} | {step[v] / step['summed']:.2f}× | {peak[v]:.0f} | "
              f"{peak[v] / peak['summed']:.2f}× |")
    return [Row("PCGrad cost", "step time, 4-task steps", step["pcgrad"], step["summed"],
                "summed task gradients", "s", False),
            Row("PCGrad cost", "peak RSS, 4-task steps", peak["pcgrad"], peak["summed"],
                "summed task gradients", "MB", False)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")


def main() -> None:
    bench_main(__doc__, add_arguments, run, lambda args: measure(args.child, args))


if __name__ == "__main__":
    main()
