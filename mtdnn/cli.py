"""The commands: ``mtdnn-train``, ``mtdnn-predict``, ``mtdnn-prep``, ``mtdnn-export``,
``mtdnn-experiment`` and ``mtdnn-probe`` once installed (``pip install .``), or
``python train.py`` / ``python predict.py`` / ``python -m ...`` from a clone.

Each prints one paragraph for an error caused by input and exits with 2 (``--debug``
shows the traceback); see :func:`mtdnn.errors.run_cli`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mtdnn.commandline import add_debug_flag, parsed_with_logging, run_cli

TRAIN_HELP = """Train: multi-task stage and per-task fine-tuning are the same command; the
second sets init_checkpoint=<run>/last (the stage as it ended, as the experiment
runner starts from it). Config keys come from --config (a YAML file, or a
packaged config by name: --list-configs) with key=value overrides laid over it; every key
is listed below.

  mtdnn-train --config mtdnn_glue optimizer.lr=3e-5 'tasks=[rte,mrpc]'
"""

PREDICT_HELP = """Predict: score data with a checkpoint's heads. The input is what training
reads: canonical JSONL, a CSV, TSV or Parquet file, or a Hugging Face dataset split
('{dataset: NAME, config: CONFIG, split: SPLIT}'), with --columns mapping the task's
fields to the file's columns ('{sentence1: premise, sentence2: hypothesis}'). The output is
JSONL, or CSV when its name ends in .csv (or with --format).

  mtdnn-predict --checkpoint runs/rte/best --task rte --input my.csv \\
      --columns '{sentence1: premise, sentence2: hypothesis}' --output predictions.csv

Several --checkpoint values ensemble the models (mean of class probabilities, or of scores
for regression). Several --task values run the encoder once and write each task's
prediction per example. With labels and one task, the task's metrics are printed and
written to <output>.metrics.json. --format glue writes a GLUE submission TSV
(index<TAB>prediction).
"""


def train_main(argv: list[str] | None = None) -> None:
    from mtdnn.config.help import help_epilog
    from mtdnn.config.resolve import resolve_config

    parser = argparse.ArgumentParser(prog="mtdnn-train", description=TRAIN_HELP,
                                     epilog=help_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="run config: a YAML file, or the name of a packaged "
                                         "one (--list-configs), e.g. demo_stage1")
    parser.add_argument("--list-configs", action="store_true",
                        help="list the packaged run configs and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override config keys, e.g. optimizer.lr=3e-5 tasks=[rte,mrpc]")
    add_debug_flag(parser)
    args = parsed_with_logging(parser, argv)
    if args.list_configs:
        print(list_configs())
        return
    config = resolve_config(args.config, args.overrides)  # a bad key is answered before torch loads
    from mtdnn.training.trainer import train

    summary = train(config)
    if "best" not in summary:  # not rank 0 of a torchrun job
        return
    print(json.dumps({"run_dir": summary["run_dir"], "steps": summary["steps"],
                      "best": summary["best"]["metrics"], "best_step": summary["best"]["step"]}))


def predict_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mtdnn-predict", description=PREDICT_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, action="append", required=True,
                        help="checkpoint folder (repeat to ensemble)")
    parser.add_argument("--task", action="append", required=True,
                        help="a task (head) to predict with (repeat for several heads)")
    parser.add_argument("--input", required=True,
                        help="a .jsonl/.csv/.tsv/.parquet file, or '{dataset: NAME, split: S}'")
    parser.add_argument("--columns", help="task field -> the input's column, as YAML: "
                                          "'{sentence: text}'")
    parser.add_argument("--output", type=Path, required=True,
                        help="predictions file (JSONL; CSV if it ends in .csv)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output file (never an input)")
    parser.add_argument("--batch-size", type=int, help="default: the run's eval_batch_size")
    parser.add_argument("--format", choices=["jsonl", "csv", "glue"],
                        help="jsonl, csv, or a GLUE submission TSV (default: by --output's "
                             "suffix: .csv is CSV, anything else JSONL)")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
                        help="auto (default): bf16 where the hardware has it natively (CUDA, "
                             "CPUs with AVX512-BF16 or AMX), fp32 elsewhere")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    source, columns = prediction_source(args.input, args.columns)
    from mtdnn.inference.predictor import predict_file

    result = predict_file(args.checkpoint, args.task, source, args.output,
                          args.batch_size, args.format, progress=not args.no_progress,
                          overwrite=args.overwrite, precision=args.precision,
                          columns=columns)
    if result["metrics"] is not None:
        print(json.dumps({"task": args.task[0], "metrics": result["metrics"]}))
    print(f"{result['examples']} examples, {result['examples_per_s']:.1f} examples/s "
          f"({result['precision']}); predictions: {args.output}")


def list_configs() -> str:
    """The packaged run configs, each with the first sentence of its header comment."""
    from mtdnn.config.resolve import first_sentence, packaged_configs

    lines = []
    for name, path in packaged_configs().items():
        lines.append(f"{name:<20} {first_sentence(path.read_text())}")
    return "\n".join(lines) + f"\n(in {next(iter(packaged_configs().values())).parent})"


def prediction_source(text: str, columns: str | None) -> tuple[Any, dict[str, str]]:
    """``--input`` and ``--columns`` as training reads them (a dataset split is a YAML
    mapping, as under ``tasks.<task>.train``)."""
    import yaml

    from mtdnn.config.schema import build
    from mtdnn.config.train_config import DatasetSource
    from mtdnn.errors import MtdnnError

    source: Any = text
    if text.lstrip().startswith("{"):
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError:
            spec = None
        if not isinstance(spec, dict):
            raise MtdnnError(f"{text!r} is not a mapping", key="--input",
                             allowed="a file path, or '{dataset: NAME, split: SPLIT}'")
        source = build(DatasetSource, spec, source="--input")
    mapping: Any = {}
    if columns is not None:
        try:
            mapping = yaml.safe_load(columns)
        except yaml.YAMLError:
            mapping = None
        if not isinstance(mapping, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
            raise MtdnnError(f"{columns!r} is not a mapping of field names to column names",
                             key="--columns", allowed="e.g. '{sentence1: premise}'")
    return source, mapping


def train_command() -> None:
    run_cli(train_main)


def predict_command() -> None:
    run_cli(predict_main)


def prep_command() -> None:
    from mtdnn.data_prep.__main__ import main

    run_cli(main)


def export_command() -> None:
    from mtdnn.inference.export import main

    run_cli(main)


def experiment_command() -> None:
    from mtdnn.experiment import main

    run_cli(main)


def probe_command() -> None:
    from mtdnn.analysis.smart_probe import main

    run_cli(main)
