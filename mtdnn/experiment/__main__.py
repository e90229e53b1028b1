"""``python -m mtdnn.experiment``."""

from mtdnn.errors import run_cli
from mtdnn.experiment.command import main

run_cli(main)
