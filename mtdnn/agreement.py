"""python -m mtdnn.agreement: agreement with ChaosNLI's human labels, and its data filters.

The command's documented name; its code is :mod:`mtdnn.analysis.agreement`."""

from mtdnn.analysis.agreement import main
from mtdnn.commandline import run_cli

if __name__ == "__main__":
    run_cli(main)
