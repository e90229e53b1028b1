"""What every benchmark shares: the rows of the summary table, the machine line, and
running one measurement in a fresh process (so its time and peak memory are its own)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
THREADS = 2


@dataclass
class Row:
    """One line of the ``make bench`` table: a measure of ours against a reference (what a
    user would pick instead, or the plain baseline a cost is measured against)."""

    benchmark: str
    measure: str
    ours: float
    reference: float
    reference_name: str
    unit: str
    higher_is_better: bool
    target: float | None = None  # on ours ÷ reference: a floor if higher is better, else a cap

    @property
    def ratio(self) -> float:
        return self.ours / self.reference

    def verdict(self) -> str:
        if self.target is None:
            return "—"
        met = self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target
        sign = "≥" if self.higher_is_better else "≤"
        return f"{sign} {self.target:g}× ({'met' if met else 'NOT met'})"


def machine_line() -> str:
    import tokenizers
    import torch
    import transformers

    return (f"{os.cpu_count()} CPU cores, {THREADS} torch threads, {platform.machine()}; "
            f"Python {platform.python_version()}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}, tokenizers {tokenizers.__version__}")


def summary_table(rows: list[Row]) -> str:
    lines = ["| benchmark | measure | ours | reference | ours ÷ reference | better | target |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.benchmark} | {row.measure} | {row.ours:,.4g} {row.unit} | "
                     f"{row.reference:,.4g} {row.unit} ({row.reference_name}) | "
                     f"{row.ratio:.2f}× | {'higher' if row.higher_is_better else 'lower'} | "
                     f"{row.verdict()} |")
    return "\n".join(lines)


def in_fresh_process(script: Path, *args: str) -> dict:
    """Run ``script --child ...`` and return the JSON object on its last stdout line."""
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, str(script), "--child", *args], cwd=REPO,
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{script.name} {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_main(doc: str, add_arguments: Callable[[argparse.ArgumentParser], None],
               run: Callable[[argparse.Namespace], list[Row]],
               child: Callable[[argparse.Namespace], dict] | None = None) -> None:
    """A benchmark's command line: its size flags, ``--rows-json``, and (for benchmarks that
    measure in fresh processes) the hidden ``--child`` entry those processes use."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--rows-json", type=Path, help="also write the summary rows here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and child is not None:
        print(json.dumps(child(args)))
        return
    print(machine_line())
    rows = run(args)
    if args.rows_json is not None:
        args.rows_json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
