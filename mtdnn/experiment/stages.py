"""Stage 1: the multi-task runs the arms start from, trained once per stage seed by the
worker that claims it; a stage re-trained on another machine is checked against its record."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from mtdnn.checkpoint import continue_keys, weights_fingerprint
from mtdnn.config import config_from_dict
from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import ExperimentConfig, stage_of, stage_run_keys, stage_train_keys
from mtdnn.experiment.records import (
    RECORD,
    find_stage_record,
    realizations,
    stage_folder,
    stage_record,
    stage_trained,
)
from mtdnn.experiment.schedule import finishes_in_time, typical_stage_seconds
from mtdnn.files import atomic_write_json, claimed, read_json

log = logging.getLogger(__name__)


STAGE_POLL_SECONDS = 30


def build_stage(config: ExperimentConfig, name: str, seed: int,
                wait: bool = True) -> tuple[Path, str] | None:
    """A stage's checkpoint and fingerprint: one worker trains it (claiming its folder);
    another that needs it waits for it (``wait``) or moves on (returns None)."""
    folder = stage_folder(config, name, seed)
    while True:
        with claimed(folder) as mine:
            if mine:
                return _build_stage(config, name, seed, folder)
        if not wait:
            log.info("stage %s seed %d is being trained by another worker; left to it for now",
                     name, seed)
            return None
        log.info("stage %s seed %d is being trained by another worker; waiting", name, seed)
        time.sleep(STAGE_POLL_SECONDS)


def build_stages(config: ExperimentConfig, stop_by: datetime | None = None) -> None:
    """Every stage seed an arm starts from (``--stages-only``: the long stage-1 runs can
    start before the fine-tuning settings are chosen); one claimed by another worker is
    left to it, and with ``stop_by`` one not expected to finish by then is left for later."""
    needed = {(stage, seed) for arm in config.arms if (stage := stage_of(config, arm))
              for seed in config.stages[stage].seeds}
    for stage, seed in sorted(needed):
        if (stop_by is not None and not stage_trained(stage_folder(config, stage, seed))
                and not finishes_in_time(typical_stage_seconds(config, stage), stop_by,
                                         f"stage {stage} seed {seed}")):
            continue
        build_stage(config, stage, seed, wait=False)


def _build_stage(config: ExperimentConfig, name: str, seed: int, folder: Path
                 ) -> tuple[Path, str]:
    """Train (or resume) the stage if this machine lacks it. A stage re-trained in a later
    session must come out with the weights its finished runs started from, unless
    ``retrained_stages: accept`` (then it is another realization of the stage)."""
    from mtdnn.trainer import train

    record = stage_record(config, name, seed)
    keys = stage_train_keys(config, name)
    if not stage_trained(folder):
        log.info("stage %s seed %d", name, seed)
        train(config_from_dict({**stage_run_keys(config, name), "seed": seed,
                                "output_dir": str(folder),
                                **continue_keys(folder)}, source=f"stage {folder}"))
    fingerprint = weights_fingerprint(folder / "last")
    summary = read_json(folder / "summary.json")
    made = {"weights_fingerprint": fingerprint, "machine": summary.get("machine"),
            "metrics": summary["last"]["metrics"], "train_seconds": summary.get("train_seconds")}
    if record is None:
        record = {"stage": name, "seed": seed, "weights_fingerprint": fingerprint,
                  "train_keys": keys, "precision": summary.get("precision"),
                  "steps": summary["steps"], "metrics": summary["last"]["metrics"],
                  "machine": summary.get("machine"),
                  "train_seconds": summary.get("train_seconds")}
    elif fingerprint not in {r["weights_fingerprint"] for r in realizations(record)}:
        earlier = realizations(record)[-1]
        if config.retrained_stages == "error":
            raise MtdnnError(
                f"the re-trained stage '{name}' has weights {fingerprint[:12]} (made on "
                f"{describe(made['machine'])}), but its finished runs started from "
                f"{earlier['weights_fingerprint'][:12]} (made on "
                f"{describe(earlier.get('machine'))})", file=find_stage_record(config, name, seed),
                key="retrained_stages",
                allowed="the same stage; retrained_stages: accept to record it as another "
                        "realization (fp32 differs in its last bits between CPUs and thread "
                        "counts); or a new output_dir to start over")
        log.warning("stage %s seed %d: re-trained weights %s differ from %s (made on %s, now "
                    "%s): recorded as realization %d", name, seed, fingerprint[:12],
                    earlier["weights_fingerprint"][:12], describe(earlier.get("machine")),
                    describe(made["machine"]), len(realizations(record)) + 1)
        record = {**record, "weights_fingerprint": fingerprint,
                  "realizations": [*realizations(record), made]}
    if not (folder / RECORD).is_file() or read_json(folder / RECORD) != record:
        atomic_write_json(folder / RECORD, record)
    return folder / "last", fingerprint


def describe(machine: dict[str, Any] | None) -> str:
    if not machine:
        return "an unrecorded machine"
    return (f"{machine.get('cpu')} ({machine.get('cpu_capability')}, "
            f"{machine.get('torch_threads')} threads)")
