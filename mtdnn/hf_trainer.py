"""python -m mtdnn.hf_trainer: one task with Hugging Face's Trainer.

The command's documented name; its code is :mod:`mtdnn.training.hf_trainer`."""

from mtdnn.commandline import run_cli
from mtdnn.training.hf_trainer import main

if __name__ == "__main__":
    run_cli(main)
