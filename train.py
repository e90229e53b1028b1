"""Train: ``python train.py --config configs/<name>.yaml [key=value ...]``.

The multi-task stage and the per-task fine-tuning stage are the same command; the second
sets ``init_checkpoint=<run>/best``. See README.md for the config keys.
"""

from __future__ import annotations

import argparse
import json
import logging

from mtdnn.config import load_config
from mtdnn.errors import run_cli
from mtdnn.trainer import train


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="run config YAML (configs/*.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override config keys, e.g. optimizer.lr=3e-5 tasks=[rte,mrpc]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    summary = train(load_config(args.config, args.overrides))
    if "best" not in summary:  # not rank 0 of a torchrun job
        return
    print(json.dumps({"run_dir": summary["run_dir"], "steps": summary["steps"],
                      "best": summary["best"]["metrics"], "best_step": summary["best"]["step"]}))


if __name__ == "__main__":
    run_cli(main)
