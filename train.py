"""Train: ``python train.py --config <file or packaged name> [key=value ...]``; installed, the
same command is ``mtdnn-train`` (see :mod:`mtdnn.cli`)."""

from mtdnn.cli import train_command
from mtdnn.cli import train_main as main

__all__ = ["main"]

if __name__ == "__main__":
    train_command()
