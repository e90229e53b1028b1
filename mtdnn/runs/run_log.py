"""A run's log file (``train.log``): every line the run prints, from the resolved config at
its start to its summary, whether the run was started from the command line or Python."""

from __future__ import annotations

import logging
from pathlib import Path

from mtdnn.config.train_config import TrainConfig
from mtdnn.runs.run_dir import PlannedRun

log = logging.getLogger(__name__)

class RunLog(logging.FileHandler):
    """``<run>/train.log`` for as long as the run lasts. A run started from Python, where
    logging is not set up (so the package's INFO records would be dropped), still writes its
    whole log there; the package's level is put back when the run ends."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8")
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s",
                                            datefmt="%Y-%m-%d %H:%M:%S"))
        self.package = logging.getLogger("mtdnn")
        self.package_level = self.package.level
        if self.package.getEffectiveLevel() > logging.INFO:
            self.package.setLevel(logging.INFO)
        logging.getLogger().addHandler(self)

    def detach(self) -> None:
        logging.getLogger().removeHandler(self)
        self.package.setLevel(self.package_level)
        self.close()


def attach_run_log(planned: PlannedRun, config: TrainConfig) -> RunLog:
    """Everything the run logs, also in ``<run>/train.log`` (appended to when resumed),
    which opens with the full resolved config; the screen gets a one-line summary."""
    run_dir = planned.run.path
    handler = RunLog(planned.run.log)
    handler.stream.write(f"resolved config:\n{planned.config_yaml}\n")
    smart = (f"SMART ε {config.smart.epsilon:g}, λ_s {config.smart.adv_weight:g}, μ "
             f"{config.smart.bregman_weight:g}, teacher {config.smart.teacher_schedule}"
             if config.smart.enabled else "no SMART")
    log.info("run %s: tasks %s; encoder %s; seed %d; %s; full config and log in %s",
             run_dir, ", ".join(config.tasks), config.encoder, config.seed, smart,
             planned.run.log)
    return handler
