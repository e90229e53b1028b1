"""``make bench``: every benchmark in turn, then one table of ratios.

    python benchmarks/run_all.py [--only startup data_speed smart_cost pcgrad_cost
                                        optimizer_step precision_speed train_speed
                                        task_type_speed inference_speed scaling]
                                 [--out runs/bench]

Each benchmark prints its own detailed table as it goes (run one alone, with its size
flags, as ``python benchmarks/<name>.py --help`` shows). The summary table, with the
machine and versions, is printed last and written to ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
import time
from pathlib import Path

from common import REPO, Row, machine_line, summary_table

BENCHMARKS = ("startup", "data_speed", "smart_cost", "pcgrad_cost", "optimizer_step",
              "precision_speed", "train_speed", "task_type_speed", "inference_speed", "scaling")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench")
    args = parser.parse_args()
    started = time.perf_counter()
    rows: list[Row] = []
    details = []
    for name in args.only:
        module = importlib.import_module(name)
        defaults = argparse.ArgumentParser()
        module.add_arguments(defaults)
        print(f"\n## {name}", flush=True)
        printed = Tee(sys.stdout)
        with contextlib.redirect_stdout(printed):
            rows += module.run(defaults.parse_args([]))
        details.append(f"### {name}\n\n{printed.text().strip()}\n")
    minutes = (time.perf_counter() - started) / 60
    summary = (f"{machine_line()}\n{len(rows)} measures in {minutes:.1f} min. Ratios are ours "
               f"÷ reference; 'better' says which way is better for that measure.\n\n"
               f"{summary_table(rows)}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(
        f"## Summary\n\n{summary}\n## Details\n\n" + "\n".join(details))
    print(f"\n## summary\n{summary}\nwritten to {args.out / 'results.md'} (with the details)")


class Tee(io.TextIOBase):
    """Print as usual and keep a copy (progress lines starting with spaces left out)."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream, self.parts = stream, []

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.stream.flush()
        self.parts.append(text)
        return len(text)

    def text(self) -> str:
        lines = "".join(self.parts).splitlines()
        return "\n".join(line for line in lines if not line.startswith("  "))


if __name__ == "__main__":
    main()
