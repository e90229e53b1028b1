"""A run's log file (``train.log``): every line the run prints, from the resolved config at
its start to its summary, whether the run was started from the command line or Python."""

from __future__ import annotations

import logging
from pathlib import Path

from mtdnn.config.train_config import TrainConfig
from mtdnn.runs.run_dir import PlannedRun

log = logging.getLogger(__name__)
LINE_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(message)s",
                                datefmt="%Y-%m-%d %H:%M:%S")


class EarlyLines(logging.Handler):
    """What a run logs before its folder exists (the device and precision, where its weights
    come from, each data file's counts): kept, then written at the top of ``train.log``,
    so that the file holds every line the run printed. A start that fails keeps none."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(LINE_FORMAT)
        self.lines: list[str] = []
        self.package = logging.getLogger("mtdnn")
        self.package_level = self.package.level
        if self.package.getEffectiveLevel() > logging.INFO:
            self.package.setLevel(logging.INFO)
        logging.getLogger().addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def detach(self) -> None:
        logging.getLogger().removeHandler(self)
        self.package.setLevel(self.package_level)


class RunLog(logging.FileHandler):
    """``<run>/train.log`` for as long as the run lasts. A run started from Python, where
    logging is not set up (so the package's INFO records would be dropped), still writes its
    whole log there; the package's level is put back when the run ends."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8")
        self.setFormatter(LINE_FORMAT)
        self.package = logging.getLogger("mtdnn")
        self.package_level = self.package.level
        if self.package.getEffectiveLevel() > logging.INFO:
            self.package.setLevel(logging.INFO)
        logging.getLogger().addHandler(self)

    def detach(self) -> None:
        logging.getLogger().removeHandler(self)
        self.package.setLevel(self.package_level)
        self.close()


def attach_run_log(planned: PlannedRun, config: TrainConfig,
                   early: EarlyLines | None = None) -> RunLog:
    """Everything the run logs, also in ``<run>/train.log`` (appended to when resumed),
    which opens with the full resolved config and the lines logged before the folder
    existed (``early``); the screen gets a one-line summary."""
    run_dir = planned.run.path
    if early is not None:
        early.detach()
    handler = RunLog(planned.run.log)
    handler.stream.write(f"resolved config:\n{planned.config_yaml}\n")
    for line in early.lines if early is not None else ():
        handler.stream.write(line + "\n")
    smart = (f"SMART ε {config.smart.epsilon:g}, λ_s {config.smart.adv_weight:g}, μ "
             f"{config.smart.bregman_weight:g}, teacher {config.smart.teacher_schedule}"
             if config.smart.enabled else "no SMART")
    start = (f"from {config.init_checkpoint}" if config.init_checkpoint
             else f"encoder {config.encoder}")
    log.info("run %s: tasks %s; %s; seed %d; %s; full config and log in %s",
             run_dir, ", ".join(config.tasks), start, config.seed, smart, planned.run.log)
    return handler
