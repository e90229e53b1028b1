"""mtdnn: multi-task fine-tuning of pre-trained encoders with SMART.

    from mtdnn import train, Predictor

    summary = train("mtdnn_glue", epochs=2, optimizer={"lr": 3e-5})
    Predictor(summary["run_dir"] + "/best").predict([("A man plays.", "Someone plays.")])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mtdnn._version import __version__  # noqa: F401 - the package version

__all__ = ["Predictor", "train"]

if TYPE_CHECKING:
    from mtdnn.config.train_config import TrainConfig
    from mtdnn.inference.predictor import Predictor


def train(config: TrainConfig | str | dict[str, Any] | None = None, /,
          **keys: Any) -> dict[str, Any]:
    """Train one run and return its summary (run folder, steps, best and last metrics).

    ``config`` is a :class:`~mtdnn.config.train_config.TrainConfig`, the path of a run
    config YAML, or a
    mapping of config keys; keyword arguments are config keys laid over it (nested keys as
    mappings, merged: ``optimizer={"lr": 3e-5}``; ``tasks`` replaces the file's tasks, as
    ``tasks=[...]`` does on the command line), validated as the command line's are.
    """
    from mtdnn.config.resolve import resolve_config
    from mtdnn.training.trainer import train as run

    return run(resolve_config(config, keys=keys))


def __getattr__(name: str) -> Any:
    # Predictor imports torch and transformers: only when asked for.
    if name == "Predictor":
        from mtdnn.inference.predictor import Predictor

        return Predictor
    raise AttributeError(f"module 'mtdnn' has no attribute {name!r}")
