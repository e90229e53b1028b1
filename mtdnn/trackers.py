"""Where a run's logged values go: ``<run>/metrics.jsonl`` always (one JSON line per
training log and per dev evaluation: what the experiment runner and the tables read), and
the scalars to the trackers of ``report_to``: tensorboard (default, in
``<run>/tensorboard``), and Weights & Biases or MLflow when they are installed and asked
for."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from mtdnn.errors import MtdnnError

PACKAGES = {"wandb": "wandb", "mlflow": "mlflow"}


def check_trackers(names: tuple[str, ...]) -> None:
    """A tracker whose package is missing is an error before the run starts."""
    for name in names:
        if name in PACKAGES and importlib.util.find_spec(PACKAGES[name]) is None:
            raise MtdnnError(f"report_to names '{name}', which is not installed",
                             key="report_to", allowed=f"pip install {PACKAGES[name]}, or "
                                                      "report_to: [tensorboard]")


class Trackers:
    """``record(entry)``: a line of ``metrics.jsonl``; ``add_scalar(tag, value, step)``: to
    every tracker the run asked for. A run resumed at ``first_step`` drops tensorboard's
    events a killed run logged after it (the run folder drops ``metrics.jsonl``'s tail), so
    that its log reads as if it had never stopped."""

    def __init__(self, names: tuple[str, ...], run_dir: Path, first_step: int,
                 config: dict[str, Any]) -> None:
        from mtdnn.run_dir import RunDir

        self.sinks: list[Any] = []
        if "tensorboard" in names:
            from torch.utils.tensorboard import SummaryWriter

            self.sinks.append(SummaryWriter(str(run_dir / "tensorboard"),
                                            purge_step=first_step + 1))
        if "wandb" in names:
            import wandb

            self.wandb = wandb.init(dir=str(run_dir), name=run_dir.name, config=config,
                                    resume="allow")
            self.sinks.append(_WandbSink(self.wandb))
        if "mlflow" in names:
            import mlflow

            mlflow.start_run(run_name=run_dir.name)
            mlflow.log_params({k: str(v)[:250] for k, v in config.items()})
            self.sinks.append(_MlflowSink(mlflow))
        self.metrics = open(RunDir(run_dir).metrics, "a", encoding="utf-8")

    def record(self, entry: dict[str, Any]) -> None:
        """One line of ``metrics.jsonl``, flushed (a killed run keeps what it logged)."""
        self.metrics.write(json.dumps(entry) + "\n")
        self.metrics.flush()

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        for sink in self.sinks:
            sink.add_scalar(tag, value, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        self.metrics.close()


class _WandbSink:
    def __init__(self, run: Any) -> None:
        self.run = run

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.run.log({tag: value}, step=step)

    def close(self) -> None:
        self.run.finish()


class _MlflowSink:
    def __init__(self, mlflow: Any) -> None:
        self.mlflow = mlflow

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.mlflow.log_metric(tag.replace("/", "."), value, step=step)

    def close(self) -> None:
        self.mlflow.end_run()
