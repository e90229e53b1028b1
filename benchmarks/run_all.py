"""``make bench``: every benchmark in turn, then one table of ratios.

    python benchmarks/run_all.py [--only data_speed smart_cost train_speed inference_speed scaling]
                                 [--out runs/bench]

Each benchmark prints its own detailed table as it goes (run one alone, with its size
flags, as ``python benchmarks/<name>.py --help`` shows). The summary table, with the
machine and versions, is printed last and written to ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import REPO, Row, machine_line, summary_table  # noqa: E402

BENCHMARKS = ("data_speed", "smart_cost", "train_speed", "inference_speed", "scaling")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench")
    args = parser.parse_args()
    started = time.perf_counter()
    rows: list[Row] = []
    for name in args.only:
        module = importlib.import_module(f"benchmarks.{name}")
        defaults = argparse.ArgumentParser()
        module.add_arguments(defaults)
        print(f"\n## {name}", flush=True)
        rows += module.run(defaults.parse_args([]))
    minutes = (time.perf_counter() - started) / 60
    report = (f"{machine_line()}\n{len(rows)} measures in {minutes:.1f} min. Ratios are ours ÷ "
              f"reference; 'better' says which way is better for that measure.\n\n"
              f"{summary_table(rows)}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(report)
    print(f"\n## summary\n{report}\nwritten to {args.out / 'results.md'}")


if __name__ == "__main__":
    main()
