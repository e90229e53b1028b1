"""Command line: ``python -m mtdnn.data_prep <glue|snli|scitail|ner|squad|all|subsets|groups> ...``.

Examples::

    python -m mtdnn.data_prep download --raw-dir raw            # needs internet
    python -m mtdnn.data_prep all --raw-dir ../shared/data --out-dir data
    python -m mtdnn.data_prep subsets --data-dir data --task scitail --preset paper --seed 13
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtdnn.commandline import add_debug_flag, command_parser, run_cli
from mtdnn.data_prep.canonical import Staging, convert_split
from mtdnn.data_prep.conll import tagging_sources
from mtdnn.data_prep.download import ARCHIVES, download
from mtdnn.data_prep.glue import glue_sources
from mtdnn.data_prep.groups import draw_group_split, group_dir
from mtdnn.data_prep.scitail import scitail_sources
from mtdnn.data_prep.snli import snli_sources
from mtdnn.data_prep.squad import squad_sources
from mtdnn.data_prep.subsets import (
    draw_subsets,
    paper_sizes,
    sizes_from_counts,
    sizes_from_percents,
    subset_dir,
)
from mtdnn.errors import Interrupted, MtdnnError
from mtdnn.files import check_output, read_jsonl
from mtdnn.tasks.task_def import PACKAGED, load_task_defs

DATASETS = {"glue": glue_sources, "snli": snli_sources, "scitail": scitail_sources,
            "ner": tagging_sources, "squad": squad_sources}


def _parser() -> argparse.ArgumentParser:
    parser = command_parser("data_prep", __doc__)
    parser.add_argument("--task-defs", nargs="+", default=[PACKAGED],
                        help="task definition files or folders (default: packaged, the "
                             "shipped ones)")
    add_debug_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in [*DATASETS, "all"]:
        convert = commands.add_parser(name, help=f"convert raw {name} files to canonical JSONL")
        convert.add_argument("--raw-dir", type=Path, required=True,
                             help="folder holding the raw downloads (e.g. ../shared/data)")
        convert.add_argument("--out-dir", type=Path, default=Path("data"),
                             help="where <task>/<split>.jsonl and manifest.json go "
                                  "(default: %(default)s)")
    fetch = commands.add_parser("download", help="download the official raw files (internet)")
    fetch.add_argument("--raw-dir", type=Path, required=True, help="where to put them")
    fetch.add_argument("datasets", nargs="*", metavar="DATASET",
                       help=f"any of {', '.join(ARCHIVES)} (default: all)")
    subsets = commands.add_parser("subsets", help="draw seeded nested train subsets")
    subsets.add_argument("--data-dir", type=Path, default=Path("data"),
                         help="the --out-dir of a previous conversion (default: %(default)s)")
    subsets.add_argument("--task", required=True, help="task name, e.g. scitail")
    subsets.add_argument("--split", default="train",
                         help="the prepared split to draw from (default: %(default)s)")
    subsets.add_argument("--seed", type=int, default=13,
                         help="seed of the permutation (default: %(default)s)")
    subsets.add_argument("--out-dir", type=Path,
                         help="default: <data-dir>/<task>/subsets/seed<seed>")
    how = subsets.add_mutually_exclusive_group(required=True)
    how.add_argument("--preset", choices=["paper"],
                     help="0.1/1/10/100%% of the full official train split (SMART Table 5)")
    how.add_argument("--percent", nargs="+", help="percents of --reference-size")
    how.add_argument("--count", nargs="+", type=int, help="absolute subset sizes")
    subsets.add_argument("--reference-size", type=int,
                         help="rows that 100%% stands for (default: rows in the train file)")
    subsets.add_argument("--holdout", type=int, default=0,
                         help="also write holdout.jsonl: the last N rows of the permutation, "
                              "in none of the subsets (a tuning split from train)")
    groups = commands.add_parser("groups", help="group a prepared file's rows by a field "
                                 "(ranking) and split it into train/dev by group")
    groups.add_argument("--data-dir", type=Path, default=Path("data"),
                        help="the --out-dir of a previous conversion (default: %(default)s)")
    groups.add_argument("--task", required=True, help="task name, e.g. qnli")
    groups.add_argument("--split", default="dev",
                        help="the prepared split to group (default: %(default)s)")
    groups.add_argument("--key", required=True,
                        help="the field its candidates share, e.g. question")
    groups.add_argument("--dev-groups", type=int, required=True,
                        help="groups dealt to dev.jsonl; the rest go to train.jsonl")
    groups.add_argument("--positive",
                        help="the label of the candidate that should rank first (default: "
                             "the task's first label); groups without exactly one are left out")
    groups.add_argument("--keep-all", action="store_true",
                        help="keep every group (e.g. a span task's articles): no positive "
                             "is looked for")
    groups.add_argument("--seed", type=int, default=13,
                        help="seed of the permutation of groups (default: %(default)s)")
    groups.add_argument("--out-dir", type=Path,
                        help="default: <data-dir>/<task>/groups/seed<seed>")
    return parser


def convert(datasets: list[str], raw_dir: Path, out_dir: Path, tasks: dict) -> None:
    """Convert the raw files of ``datasets`` and publish them all at once."""
    try:
        _convert(datasets, raw_dir, out_dir, tasks)
    except KeyboardInterrupt:
        raise Interrupted("interrupted; the output folder is as it was", file=out_dir
                          ) from None


def _convert(datasets: list[str], raw_dir: Path, out_dir: Path, tasks: dict) -> None:
    if not raw_dir.is_dir():
        raise MtdnnError("raw data folder not found", file=raw_dir,
                         allowed="a folder holding glue/, snli/, scitail/ downloads")
    if out_dir.resolve() == raw_dir.resolve():
        raise MtdnnError("the output folder is the raw data folder", file=out_dir,
                         key="--out-dir", allowed="a folder apart from --raw-dir, e.g. data")
    sources = [s for name in datasets for s in DATASETS[name](raw_dir, tasks)]
    if not sources:
        raise MtdnnError(f"no raw files of {', '.join(datasets)} found", file=raw_dir)
    for source in sources:
        check_output(out_dir / source.task.name / f"{source.split}.jsonl", [source.path],
                     key="--out-dir", overwrite=True)
    entries = {}
    with Staging(out_dir) as staging:
        for source in sources:
            name = f"{source.task.name}/{source.split}.jsonl"
            entries[name] = entry = convert_split(source, staging, name)
            dropped = f" (dropped {entry['dropped']})" if "dropped" in entry else ""
            print(f"{name:32s} {entry['rows']:>7,d} rows{dropped}")
        manifest = staging.publish(entries)
    print(f"wrote {len(entries)} files; manifest: {manifest}")


def _prepared(args: argparse.Namespace, tasks: dict) -> Path:
    """The prepared split a subsets or groups command draws from."""
    if args.task not in tasks:
        raise MtdnnError(f"unknown task '{args.task}'", key="--task", allowed=", ".join(tasks))
    source = args.data_dir / args.task / f"{args.split}.jsonl"
    if not source.is_file():
        raise MtdnnError(f"no prepared {args.split} file for task '{args.task}'", file=source,
                         allowed="run `python -m mtdnn.data_prep <dataset> --out-dir "
                                 "DATA_DIR` first")
    if args.seed < 0:
        raise MtdnnError(f"seed {args.seed} is negative", key="--seed",
                         allowed="a whole number >= 0")
    return source


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "download":
        unknown = sorted(set(args.datasets) - set(ARCHIVES))
        if unknown:
            raise MtdnnError(f"unknown dataset '{unknown[0]}'", key="download",
                             allowed=", ".join(ARCHIVES))
        download(args.datasets or list(ARCHIVES), args.raw_dir)
        return
    tasks = load_task_defs(args.task_defs)
    if args.command == "groups":
        source = _prepared(args, tasks)
        out_dir = args.out_dir or group_dir(args.data_dir, args.task, args.seed)
        manifest = draw_group_split(tasks[args.task], source, out_dir, args.key,
                                    args.dev_groups, args.seed, args.positive,
                                    keep_all=args.keep_all)
        print(f"manifest: {manifest}")
        return
    if args.command != "subsets":
        convert(list(DATASETS) if args.command == "all" else [args.command],
                args.raw_dir, args.out_dir, tasks)
        return
    source = _prepared(args, tasks)
    if args.holdout < 0:
        raise MtdnnError(f"holdout {args.holdout} is negative", key="--holdout",
                         allowed="a whole number >= 0")
    if args.reference_size is not None and args.reference_size <= 0:
        raise MtdnnError(f"reference size {args.reference_size} is not positive",
                         key="--reference-size", allowed="a whole number >= 1")
    if args.preset:
        sizes = paper_sizes(args.task)
    elif args.percent:
        reference = args.reference_size or sum(1 for _ in read_jsonl(source))
        sizes = sizes_from_percents(args.percent, reference)
    else:
        sizes = sizes_from_counts(args.count)
    out_dir = args.out_dir or subset_dir(args.data_dir, args.task, args.seed)
    manifest = draw_subsets(tasks[args.task], source, out_dir, sizes, args.seed,
                            holdout=args.holdout)
    print(f"manifest: {manifest}")


if __name__ == "__main__":
    run_cli(main)
