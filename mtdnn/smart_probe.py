"""python -m mtdnn.smart_probe: SMART's terms on one batch of a checkpoint.

The command's documented name; its code is :mod:`mtdnn.analysis.smart_probe`."""

from mtdnn.analysis.smart_probe import main
from mtdnn.commandline import run_cli

if __name__ == "__main__":
    run_cli(main)
