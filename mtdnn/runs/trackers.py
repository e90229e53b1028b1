"""Where a run's logged values go: ``<run>/metrics.jsonl`` always (one JSON line per
training log and per dev evaluation: what the experiment runner and the tables read), and
the scalars to the trackers of ``report_to``: tensorboard (default, in
``<run>/tensorboard``), and Weights & Biases or MLflow when they are installed and asked
for."""

from __future__ import annotations

import importlib.util
import json
from typing import TYPE_CHECKING, Any, TextIO

from mtdnn.errors import MtdnnError

if TYPE_CHECKING:
    from mtdnn.runs.run_dir import RunDir

PACKAGES = {"wandb": "wandb", "mlflow": "mlflow"}


class Trackers:
    """``record(entry)``: a line of ``metrics.jsonl``; ``add_scalar(tag, value, step)``: to
    every tracker the run asked for.

    Made before anything is written, so that a tracker whose package is missing is an error
    before the run starts; the logs open at the first value, when the run folder exists. A
    resumed run's first value drops the tensorboard events a killed run logged from that
    step on (the run folder drops ``metrics.jsonl``'s tail), so that its log reads as if it
    had never stopped. Only the process that logs (rank 0) opens anything."""

    def __init__(self, names: tuple[str, ...], run: RunDir, config: dict[str, Any]) -> None:
        for name in names:
            if name in PACKAGES and importlib.util.find_spec(PACKAGES[name]) is None:
                raise MtdnnError(f"report_to names '{name}', which is not installed",
                                 key="report_to", allowed=f"pip install {PACKAGES[name]}, or "
                                                          "report_to: [tensorboard]")
        self.names, self.run, self.config = names, run, config
        self.sinks: list[Any] | None = None
        self.metrics: TextIO | None = None

    def record(self, entry: dict[str, Any]) -> None:
        """One line of ``metrics.jsonl``, flushed (a killed run keeps what it logged)."""
        if self.metrics is None:
            self.metrics = open(self.run.metrics, "a", encoding="utf-8")
        self.metrics.write(json.dumps(entry) + "\n")
        self.metrics.flush()

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        if self.sinks is None:
            self.sinks = self._open_sinks(first_step=step)
        for sink in self.sinks:
            sink.add_scalar(tag, value, step)

    def _open_sinks(self, first_step: int) -> list[Any]:
        sinks: list[Any] = []
        folder = self.run.path
        if "tensorboard" in self.names:
            from torch.utils.tensorboard import SummaryWriter

            sinks.append(SummaryWriter(str(folder / "tensorboard"), purge_step=first_step))
        if "wandb" in self.names:
            import wandb

            sinks.append(_WandbSink(wandb.init(dir=str(folder), name=folder.name,
                                               config=self.config, resume="allow")))
        if "mlflow" in self.names:
            import mlflow

            mlflow.start_run(run_name=folder.name)
            mlflow.log_params({k: str(v)[:250] for k, v in self.config.items()})
            sinks.append(_MlflowSink(mlflow))
        return sinks

    def close(self) -> None:
        for sink in self.sinks or []:
            sink.close()
        if self.metrics is not None:
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
