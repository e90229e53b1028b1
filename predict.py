"""Predict: ``python predict.py --checkpoint DIR --task NAME --input FILE --output FILE``.

Several ``--checkpoint`` values ensemble the models (mean of class probabilities, or of
scores for regression). Input is canonical JSONL (labels optional; with labels the task's
metrics are printed and written to ``<output>.metrics.json``). ``--format glue`` writes a
GLUE submission TSV (``index<TAB>prediction``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mtdnn.errors import run_cli
from mtdnn.inference import predict_file


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, action="append", required=True,
                        help="checkpoint folder (repeat to ensemble)")
    parser.add_argument("--task", required=True, help="the task (head) to predict with")
    parser.add_argument("--input", type=Path, required=True, help="canonical JSONL")
    parser.add_argument("--output", type=Path, required=True,
                        help="predictions file (JSONL, or TSV with --format glue)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output file (never an input)")
    parser.add_argument("--batch-size", type=int, help="default: the run's eval_batch_size")
    parser.add_argument("--format", choices=["jsonl", "glue"], default="jsonl",
                        help="jsonl (default) or a GLUE submission TSV")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
                        help="auto (default): bf16 where the hardware has it natively (CUDA, "
                             "CPUs with AVX512-BF16 or AMX), fp32 elsewhere")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error")
    args = parser.parse_args(argv)
    result = predict_file(args.checkpoint, args.task, args.input, args.output,
                          args.batch_size, args.format, progress=not args.no_progress,
                          overwrite=args.overwrite, precision=args.precision)
    if result["metrics"] is not None:
        print(json.dumps({"task": args.task, "metrics": result["metrics"]}))
    print(f"{result['examples']} examples, {result['examples_per_s']:.1f} examples/s "
          f"({result['precision']}); predictions: {args.output}")


if __name__ == "__main__":
    run_cli(main)
