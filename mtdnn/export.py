"""python -m mtdnn.export: export a checkpoint's task for plain transformers.

The command's documented name; its code is :mod:`mtdnn.inference.export`."""

from mtdnn.commandline import run_cli
from mtdnn.inference.export import main

if __name__ == "__main__":
    run_cli(main)
