"""Predict: ``python predict.py --checkpoint DIR --task NAME --input FILE --output FILE``;
installed, the same command is ``mtdnn-predict`` (see :mod:`mtdnn.cli`)."""

from mtdnn.cli import predict_command
from mtdnn.cli import predict_main as main

__all__ = ["main"]

if __name__ == "__main__":
    predict_command()
