"""``python -m mtdnn.experiment``."""

from mtdnn.commandline import run_cli
from mtdnn.experiment.command import main

if __name__ == "__main__":
    run_cli(main)
