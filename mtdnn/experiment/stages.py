"""Stage 1: the multi-task runs the arms start from, trained once per stage seed (one job
each, :mod:`mtdnn.experiment.jobs`); a stage re-trained on another machine is checked
against its record."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mtdnn.config.resolve import resolve_config
from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import ExperimentConfig, stage_run_keys, stage_train_keys
from mtdnn.experiment.records import (
    RECORD,
    find_stage_record,
    read_record,
    realizations,
    stage_folder,
    stage_record,
    stage_trained,
    upgraded,
    what_ran,
    write_record,
)
from mtdnn.runs.run_dir import RunDir

log = logging.getLogger(__name__)


def build_stage(config: ExperimentConfig, name: str, seed: int) -> tuple[Path, str]:
    """A stage seed's checkpoint and weights' fingerprint: trained (or resumed) if its
    weights are not here. A stage re-trained (e.g. on another machine, after its weights
    were deleted) must come out with the weights its finished runs started from, unless
    ``retrained_stages: accept`` (then it is another realization of the stage)."""
    from mtdnn.runs.checkpoint import weights_fingerprint
    from mtdnn.training.resume import continue_keys
    from mtdnn.training.trainer import train

    folder = stage_folder(config, name, seed)
    record = stage_record(config, name, seed)
    keys = stage_train_keys(config, name)
    resolved = resolve_config({**stage_run_keys(config, name), "seed": seed,
                               "output_dir": str(folder), "progress_bar": False,
                               **continue_keys(folder)}, origin=f"stage {folder}")
    if not stage_trained(folder):
        log.info("stage %s seed %d", name, seed)
        train(resolved)
    run = RunDir(folder)
    fingerprint = weights_fingerprint(run.last)
    summary = run.summary()
    made = {"weights_fingerprint": fingerprint, "machine": summary.get("machine"),
            "metrics": summary["last"]["metrics"], "train_seconds": summary.get("train_seconds")}
    if record is None:
        record = {"stage": name, "seed": seed, "weights_fingerprint": fingerprint,
                  "train_keys": keys, "precision": summary.get("precision"),
                  "steps": summary["steps"], "metrics": summary["last"]["metrics"],
                  **what_ran(run, summary, resolved.smart),
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
    if not (folder / RECORD).is_file() or \
            read_record(folder / RECORD, "stage") != upgraded(record, kind="stage"):
        write_record(folder / RECORD, record)
    return run.last, fingerprint


def describe(machine: dict[str, Any] | None) -> str:
    if not machine:
        return "an unrecorded machine"
    return (f"{machine.get('cpu')} ({machine.get('cpu_capability')}, "
            f"{machine.get('torch_threads')} threads)")
