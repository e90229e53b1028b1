"""Training throughput: our loop against Hugging Face ``Trainer`` on the same data.

    python benchmarks/train_speed.py [--steps 16] [--batch-size 32] [--layers 6]

Real SciTail and RTE train pairs, the 6-layer packaged encoder, batch 32, max length 128,
2 torch threads, the same number of optimizer steps. Ours: ``train.py``'s loop with random
batches and with ``sampler.group_by_length``; Trainer (``DataCollatorWithPadding``) with
its default random sampling and with ``train_sampling_strategy="group_by_length"``. Each in
fp32, and like for like in bf16 autocast (ours ``precision=bf16``, Trainer ``bf16=True``).
Examples/s count training only (evaluation and checkpointing excluded on both sides).
Every measurement runs in its own process. The multi-task row trains SciTail + RTE
together (proportional sampling); its reference is Trainer-default's speed on each task,
mixed in the same proportion.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from common import REPO, THREADS, Row, bench_main, in_fresh_process

TASKS = ("scitail", "rte")


def small_dev(data_dir: Path, task: str, work: Path) -> Path:
    """32 dev rows: both sides evaluate once at the end, outside the timed part."""
    path = work / f"{task}_dev.jsonl"
    lines = (data_dir / task / "dev.jsonl").read_text().splitlines()[:32]
    path.write_text("\n".join(lines) + "\n")
    return path


def train_ours(tasks: list[str], args: argparse.Namespace, run_name: str,
               overrides: list[str]) -> dict:
    """Our training loop for ``args.steps`` steps on ``tasks`` (32-row dev files, work
    folders under ``args.work``) with extra ``overrides``; the run's summary."""
    import torch

    from mtdnn.config.resolve import resolve_config
    from mtdnn.training.trainer import train

    torch.set_num_threads(THREADS)
    return train(resolve_config(None, [
        f"tasks=[{','.join(tasks)}]",
        *[f"tasks.{t}.dev={small_dev(args.data_dir, t, args.work)}" for t in tasks],
        f"data_dir={args.data_dir}", f"max_steps={args.steps}", f"batch_size={args.batch_size}",
        f"encoder_layers={args.layers}", "progress_bar=false", "overwrite=true",
        f"output_dir={args.work / run_name}", f"cache_dir={args.work / 'cache'}", *overrides]))


def ours(tasks: list[str], variant: str, args: argparse.Namespace) -> dict:
    """``variant``: [bf16_]random | [bf16_]group_by_length."""
    bf16, _, sampling = variant.rpartition("bf16_")
    summary = train_ours(tasks, args, "run", [
        f"sampler.group_by_length={str(sampling == 'group_by_length').lower()}",
        f"precision={'bf16' if variant.startswith('bf16_') else 'fp32'}"])
    return {"examples_per_s": summary["train_examples_per_s"], "steps": summary["steps"]}


def trainer(task: str, variant: str, args: argparse.Namespace) -> dict:
    import torch

    from mtdnn.training.hf_trainer import finetune

    torch.set_num_threads(THREADS)
    result = finetune(task, args.data_dir / task / "train.jsonl",
                      small_dev(args.data_dir, task, args.work), args.work / "hf", epochs=1,
                      lr=5e-5, batch_size=args.batch_size, seed=13,
                      sampling=variant.removeprefix("bf16_"), max_steps=args.steps,
                      layers=args.layers, bf16=variant.startswith("bf16_"))
    return {"examples_per_s": result["train_examples_per_s"], "steps": result["steps"]}


def child(args: argparse.Namespace) -> dict:
    side, tasks, variant = args.child.split(":")
    if side == "ours":
        return ours(tasks.split(","), variant, args)
    return trainer(tasks, variant, args)


VARIANTS = (("ours", "random"), ("ours", "group_by_length"), ("trainer", "random"),
            ("trainer", "group_by_length"), ("ours", "bf16_group_by_length"),
            ("trainer", "bf16_random"), ("trainer", "bf16_group_by_length"))


def measure_all(args: argparse.Namespace) -> dict[str, float]:
    specs = [f"{side}:{task}:{variant}" for task in TASKS for side, variant in VARIANTS]
    specs += [f"ours:{','.join(TASKS)}:random", f"ours:{','.join(TASKS)}:group_by_length"]
    speeds = {}
    for spec in specs:
        result = in_fresh_process(Path(__file__), spec, "--steps", str(args.steps),
                                  "--batch-size", str(args.batch_size), "--layers",
                                  str(args.layers), "--data-dir", str(args.data_dir),
                                  "--work", str(args.work))
        speeds[spec] = result["examples_per_s"]
        print(f"  {spec}: {result['examples_per_s']:.1f} examples/s", flush=True)
    return speeds


def rows_from(speeds: dict[str, float], data_dir: Path) -> list[Row]:
    rows = []
    for task in TASKS:
        best = speeds[f"ours:{task}:group_by_length"]
        rows.append(Row("training", f"{task} single-task, examples/s", best,
                        speeds[f"trainer:{task}:random"], "Trainer default", "ex/s", True, 1.3))
        rows.append(Row("training", f"{task} single-task, examples/s", best,
                        speeds[f"trainer:{task}:group_by_length"], "Trainer group_by_length",
                        "ex/s", True, 1.0))
        trainer_bf16 = max(("bf16_random", "bf16_group_by_length"),
                           key=lambda v: speeds[f"trainer:{task}:{v}"])
        rows.append(Row("training", f"{task} single-task, bf16, examples/s",
                        speeds[f"ours:{task}:bf16_group_by_length"],
                        speeds[f"trainer:{task}:{trainer_bf16}"],
                        f"Trainer bf16=True, best of its samplers ({trainer_bf16[5:]})",
                        "ex/s", True, 1.3))
    sizes = {t: sum(1 for _ in open(data_dir / t / "train.jsonl")) for t in TASKS}
    share = {t: n / sum(sizes.values()) for t, n in sizes.items()}
    mixed = 1 / sum(share[t] / speeds[f"trainer:{t}:random"] for t in TASKS)
    rows.append(Row("training", "scitail+rte multi-task, examples/s",
                    speeds[f"ours:{','.join(TASKS)}:group_by_length"], mixed,
                    "Trainer default, same task mix", "ex/s", True, 1.3))
    return rows


def detail_table(speeds: dict[str, float]) -> str:
    lines = ["| data | ours, random batches | ours, group_by_length | Trainer default "
             "| Trainer group_by_length | ours bf16, group_by_length | Trainer bf16 default "
             "| Trainer bf16 group_by_length |", "|---|---|---|---|---|---|---|---|"]
    for task in (*TASKS, ",".join(TASKS)):
        cells = [speeds.get(f"{side}:{task}:{variant}") for side, variant in VARIANTS]
        lines.append(f"| {task.replace(',', ' + ')} | " + " | ".join(
            "—" if c is None else f"{c:.1f}" for c in cells) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> list[Row]:
    work = Path(tempfile.mkdtemp(prefix="bench_train_"))
    try:
        args.work = work
        print(f"Training throughput (examples/s; higher is better): {args.layers}-layer "
              f"packaged encoder, batch {args.batch_size}, {args.steps} steps, max length 128")
        speeds = measure_all(args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(detail_table(speeds))
    return rows_from(speeds, args.data_dir)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")


def main() -> None:
    bench_main(__doc__, add_arguments, run, child)

if __name__ == "__main__":
    main()
