"""How long a run takes, judged from the finished ones: ``--stop-by`` (a session's end) and
what is left of a grid in worker-hours."""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from mtdnn.config import config_from_dict
from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import (
    MULTITASK,
    ExperimentConfig,
    arm_train_keys,
    stage_of,
    without_cosmetic,
)
from mtdnn.experiment.grid import Cell, cells, grid_tasks
from mtdnn.experiment.records import (
    RECORD,
    find_record,
    realizations,
    reusable_record,
    stage_folder,
    stage_record,
    stage_trained,
    start_fingerprints,
)
from mtdnn.files import read_json

log = logging.getLogger(__name__)


def parse_stop_by(text: str, now: datetime | None = None) -> datetime:
    """``--stop-by``: an ISO 8601 date-time (``2026-11-25T11:05Z``), or ``HH:MM``, the next
    such local time. A naive date-time is local time."""
    now = now or datetime.now().astimezone()
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})", text.strip())
    try:
        if clock:
            at = now.replace(hour=int(clock[1]), minute=int(clock[2]), second=0, microsecond=0)
            return at if at > now else at + timedelta(days=1)
        at = datetime.fromisoformat(text.strip())
    except ValueError as error:
        raise MtdnnError(f"--stop-by {text!r} is not a time ({error})", key="--stop-by",
                         allowed="HH:MM (the next such local time) or an ISO 8601 date-time, "
                                 "e.g. 2026-11-25T11:05Z") from None
    return at if at.tzinfo else at.astimezone()


@dataclass(frozen=True)
class FinishedRun:
    """What a finished run's record says about how long a run takes."""

    task: str | None
    train_file: str | None
    keys: dict[str, Any]  # its training keys, without the cosmetic ones
    seconds: float  # its whole wall time (:func:`whole_wall_seconds`)
    seconds_per_step_byte: float | None  # per step and byte per example of its file


def finished_runs(config: ExperimentConfig) -> list[FinishedRun]:
    """The timed runs in this experiment's folders and ``reuse_from``'s, each once: a
    reused record is a copy of its source. Read afresh on each call, as other workers finish
    runs."""
    found: dict[tuple[Any, ...], FinishedRun] = {}
    for root in {Path(r) for r in (config.output_dir, config.publish_dir, *config.reuse_from)
                 if r}:
        for path in root.glob(f"*/*/*/*/{RECORD}"):
            record = read_json(path)
            if not record.get("wall_seconds"):
                continue
            keys = without_cosmetic(record.get("train_keys") or {})
            seconds = whole_wall_seconds(record)
            width = bytes_per_example(record.get("train_file"), record.get("train_size"))
            run = (json.dumps(keys, sort_keys=True), record.get("train_file"),
                   record.get("seed"), record.get("stage_seed"), record.get("start_fingerprint"))
            found[run] = FinishedRun(
                record.get("task"), record.get("train_file"), keys, seconds,
                seconds / record["steps"] / width if record.get("steps") and width else None)
    return list(found.values())


def typical_seconds(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
                    finished: list[FinishedRun] | None = None) -> float | None:
    """How long a run like ``cell`` takes: the median wall time of the ``finished`` runs
    (default: :func:`finished_runs`) with its task, training file and training keys (any arm
    name, seed or start weights). Before one has finished: its expected number of steps
    times the median time per step of the finished runs with its keys on other files,
    scaled by the bytes per example of the two files (a stand-in for their lengths in
    tokens: on 2026-11-25 an MNLI step took 0.63 of an RTE step, and its rows 0.63 of the
    bytes). Before any run with its keys has: the slowest finished run on its training file
    (any keys). None before any of these."""
    finished = finished_runs(config) if finished is None else finished
    keys = arm_train_keys(config, cell.arm)
    train_file = entry["file"] if cell.task != MULTITASK else None
    same_file = [run for run in finished
                 if run.task == cell.task and run.train_file == train_file]
    alike = [run.seconds for run in same_file if run.keys == keys]
    if alike:
        return float(np.median(alike))
    per_step = [run.seconds_per_step_byte for run in finished
                if run.keys == keys and run.seconds_per_step_byte is not None]
    width = bytes_per_example(train_file, entry["size"])
    if cell.task != MULTITASK and width and per_step:
        return expected_steps(keys, entry["size"]) * width * float(np.median(per_step))
    return max(run.seconds for run in same_file) if same_file else None


def whole_wall_seconds(record: dict[str, Any]) -> float:
    """A run's wall time, scaled up to all its steps where the process that finished it
    resumed it part-way (its ``wall_seconds`` time only the steps after ``resumed_from_step``)."""
    seconds, steps = float(record["wall_seconds"]), record.get("steps") or 0
    resumed = record.get("resumed_from_step") or 0
    return seconds * steps / (steps - resumed) if 0 < resumed < steps else seconds


def bytes_per_example(train_file: str | None, rows: int | None) -> float | None:
    """The mean size of a training file's rows, where the file is here."""
    if not train_file or not rows or not Path(train_file).is_file():
        return None
    return Path(train_file).stat().st_size / rows


def expected_steps(keys: dict[str, Any], size: int) -> int:
    """The optimizer steps of a one-task run on ``size`` examples (as the trainer counts
    them, with one batch per ``batch_size`` examples)."""
    train = config_from_dict({"tasks": {"x": {}}, **keys}, source="the experiment's train keys")
    return train.total_steps(math.ceil(size / train.batch_size))


def typical_stage_seconds(config: ExperimentConfig, name: str) -> float | None:
    """The median training time of a stage's realizations (any seed) that recorded it."""
    times = [r["train_seconds"] for seed in config.stages[name].seeds
             if (record := stage_record(config, name, seed)) is not None
             for r in realizations(record) if r.get("train_seconds")]
    return float(np.median(times)) if times else None


def fits_before(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
                stop_by: datetime) -> bool:
    """Whether ``cell`` (with its stage, if this machine must train that first) is expected
    to finish by ``stop_by``. A run cut off by a session's end may be lost with its run
    folder, so a worker leaves it for a later session and takes a shorter one. What no
    finished run can time (:func:`typical_seconds`) is counted as taking no time."""
    parts = [typical_seconds(config, cell, entry)]
    stage = stage_of(config, cell.arm)
    if stage is not None and not stage_trained(stage_folder(config, stage, cell.stage_seed)):
        parts.append(typical_stage_seconds(config, stage))
    known = [seconds for seconds in parts if seconds is not None]
    return finishes_in_time(sum(known) if known else None, stop_by, str(cell))


def work_left(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]]) -> str:
    """What is left of the grid and about how long one worker takes for it, judged as
    --stop-by judges (:func:`typical_seconds`), in all and per arm, task and subset: for
    planning sessions. A run that ``reuse_from`` already holds takes no time; a stage not
    yet trained is counted once, and so is one trained before whose weights are not on this
    machine (a session's end may take them), which its runs must re-train."""
    prints = start_fingerprints(config, running=False)
    left = [cell for cell in cells(config, sizes) if find_record(config, cell.folder) is None
            and not ((cell.arm, cell.stage_seed) in prints and reusable_record(
                config, cell, sizes[cell.task][cell.subset], prints[(cell.arm, cell.stage_seed)]))]
    needed = {(stage, cell.stage_seed) for cell in left
              if (stage := stage_of(config, cell.arm)) is not None}
    stages = {key for key in needed if stage_record(config, *key) is None}  # one read each
    retrain = {key for key in needed - stages if not stage_trained(stage_folder(config, *key))}
    if not left:
        return "nothing left to run"
    finished = finished_runs(config)  # one scan for the whole grid
    run_times = [typical_seconds(config, cell, sizes[cell.task][cell.subset], finished)
                 for cell in left]
    times = run_times + [typical_stage_seconds(config, stage) for stage, _ in stages | retrain]
    timed = [seconds for seconds in times if seconds is not None]
    summary = f"left: {counted(len(left), 'run')} and {counted(len(stages), 'stage')}"
    if retrain:
        summary += f" (and {len(retrain)} to re-train: trained, weights not on this machine)"
    if timed:
        summary += (f"; {len(timed)} of them like finished runs, about "
                    f"{sum(timed) / 3600:.1f} worker-hours")
    if len(timed) < len(times):
        summary += f"; {len(times) - len(timed)} like no finished run yet (not timed)"
    parts: dict[tuple[str, str, str], list[float | None]] = {}  # for the workers' queues
    for cell, seconds in zip(left, run_times, strict=True):
        parts.setdefault((cell.arm, cell.task, cell.subset), []).append(seconds)
    arms, tasks = list(config.arms), list(grid_tasks(config))
    for part in sorted(parts, key=lambda p: (arms.index(p[0]), tasks.index(p[1]))):
        found = parts[part]
        known = [seconds for seconds in found if seconds is not None]
        summary += f"\n  {' '.join(part)}: {counted(len(found), 'run')}" + (
            f", about {sum(known) / 3600:.1f} h" if known else "")
    return summary


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def finishes_in_time(expected: float | None, stop_by: datetime, what: str) -> bool:
    """Whether ``expected`` seconds (None: unknown, so yes) end by ``stop_by``; logs a no."""
    left = (stop_by - datetime.now().astimezone()).total_seconds()
    if expected is None or expected <= left:
        return True
    log.info("not started: %s takes about %.0f min, %.0f min left before --stop-by %s",
             what, expected / 60, max(left, 0) / 60, stop_by.isoformat(timespec="minutes"))
    return False
