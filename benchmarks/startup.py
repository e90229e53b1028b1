"""How fast the commands answer before any work: ``--help``, a mistake in a key and a
checkpoint that does not exist, each beside a bare interpreter (``python -c pass``),
measured side by side.

    python benchmarks/startup.py [--rounds 5]

Each command runs in a fresh process, ``--rounds`` times in turn with the reference; the
median wall time of each is compared. Target: within 1.5 s of the bare interpreter (the
commands parse and validate the config, and prediction its checkpoint's tasks and its input,
before torch and transformers are imported).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, Row, bench_main

BIN = Path(sys.executable).parent
COMMANDS = {
    "mtdnn-train --help": [str(BIN / "mtdnn-train"), "--help"],
    "mtdnn-train with a misspelt key": [str(BIN / "mtdnn-train"), "tasks=[rte]",
                                        "optimizr.lr=1e-5"],
    "mtdnn-predict --help": [str(BIN / "mtdnn-predict"), "--help"],
    "mtdnn-experiment --help": [str(BIN / "mtdnn-experiment"), "--help"],
    "mtdnn-export --help": [str(BIN / "mtdnn-export"), "--help"],
    "mtdnn-probe --help": [str(BIN / "mtdnn-probe"), "--help"],
    "mtdnn-predict with a checkpoint that is not there": [
        str(BIN / "mtdnn-predict"), "--checkpoint", "runs/no-such-run/best", "--task", "rte",
        "--input", "data/rte/dev.jsonl", "--output",
        str(Path(tempfile.gettempdir()) / "mtdnn-startup-predictions.jsonl")],
}
BARE = [sys.executable, "-c", "pass"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=5)


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, capture_output=True)
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> list[Row]:
    rows = []
    for name, command in COMMANDS.items():
        ours, bare = [], []
        for _ in range(args.rounds):
            ours.append(seconds(command))
            bare.append(seconds(BARE))
        ours_s, bare_s = statistics.median(ours), statistics.median(bare)
        print(f"{name}: {ours_s:.2f} s; python -c pass: {bare_s:.2f} s; "
              f"{ours_s - bare_s:+.2f} s", flush=True)
        # the target is an absolute margin (1.5 s over a bare interpreter), as a ratio cap
        rows.append(Row("startup", name, ours_s, bare_s, "python -c pass", "s", False,
                        target=(bare_s + 1.5) / bare_s))
    return rows


def main() -> None:
    bench_main(__doc__, add_arguments, run)


if __name__ == "__main__":
    main()
