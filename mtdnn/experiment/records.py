"""Result records: where a run's or a stage's record is, whether it was trained with the
keys and start weights the config has now, and another experiment's run reused as one."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mtdnn.config.compatibility import with_former_teacher
from mtdnn.config.resolve import resolve_config
from mtdnn.config.schema import to_dict
from mtdnn.config.smart_config import SmartConfig
from mtdnn.data.sources import input_fingerprints
from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import (
    ExperimentConfig,
    arm_train_keys,
    stage_of,
    stage_train_keys,
    without_cosmetic,
)
from mtdnn.experiment.grid import Cell, cell_keys, cells, task_file
from mtdnn.files import atomic_write_json, read_json
from mtdnn.runs.provenance import code_version
from mtdnn.runs.run_dir import RunDir
from mtdnn.tasks.task_def import select_tasks

log = logging.getLogger(__name__)


RECORD = "result.json"


def find_record(config: ExperimentConfig, relative: Path) -> Path | None:
    """A record in the output folder, or one already published."""
    roots = [Path(config.output_dir)] + ([Path(config.publish_dir)] if config.publish_dir else [])
    for root in roots:
        if (root / relative / RECORD).is_file():
            return root / relative / RECORD
    return None


def stage_folder(config: ExperimentConfig, name: str, seed: int) -> Path:
    root = Path(config.stage_dir) if config.stage_dir else Path(config.output_dir) / "stages"
    return root / name / f"seed{seed}"


def find_stage_record(config: ExperimentConfig, name: str, seed: int) -> Path | None:
    """A stage's record where it is trained, or one already published."""
    here = stage_folder(config, name, seed) / RECORD
    if here.is_file():
        return here
    return find_record(config, Path("stages") / name / f"seed{seed}")


def stage_trained(folder: Path) -> bool:
    """Whether a stage's folder holds its finished training (on this machine)."""
    return RunDir(folder).finished()


# What must be equal for a finished run of another experiment to count as a run of this one.
REUSE_FIELDS = ("task", "train_file", "dev_file", "seed", "stage_seed", "backend",
                "train_keys", "start_fingerprint")


def reusable_record(config: ExperimentConfig, cell: Cell, entry: dict[str, Any],
                    fingerprint: str | None) -> Path | None:
    """A finished run in ``reuse_from`` that is this cell's run under another arm name, on
    inputs that have not changed since it ran."""
    wanted = {"task": cell.task, "train_file": entry["file"],
              "dev_file": task_file(config, cell.task, "dev"), "seed": cell.seed,
              "stage_seed": cell.stage_seed, "backend": config.arms[cell.arm].backend,
              "train_keys": arm_train_keys(config, cell.arm), "start_fingerprint": fingerprint}
    for root in config.reuse_from:
        if not Path(root).is_dir():
            log.warning("reuse_from: no folder %s (yet); nothing reused from it", root)
            continue
        for path in sorted(Path(root).glob(f"*/{cell.task}/*/*/{RECORD}")):
            record = read_record(path)
            record["train_keys"] = without_cosmetic(record.get("train_keys") or {})
            if all(record.get(name) == wanted[name] for name in REUSE_FIELDS) and not (
                    record.get("inputs")
                    and changed_inputs(record, current_inputs(config, cell, entry))):
                return path
    return None


def reuse(config: ExperimentConfig, cell: Cell, source: Path) -> None:
    """Copy a finished run of another experiment in as this cell's record."""
    record = {**read_record(source), "arm": cell.arm, "subset": cell.subset,
              "reused_from": str(source)}
    write_record(Path(config.output_dir) / cell.folder / RECORD, record)
    log.info("reused %s for %s", source, cell)


def check_record(config: ExperimentConfig, cell: Cell, record: dict[str, Any], path: Path,
                 allowed: set[str | None] | None) -> None:
    """A finished run trained with other keys, or from other start weights, is an error:
    its number would sit in the table next to runs it cannot be compared with."""
    saved, now = without_cosmetic(record.get("train_keys") or {}), arm_train_keys(config, cell.arm)
    if saved != now:
        key = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))[0]
        raise MtdnnError(
            f"this finished run was trained with train.{key}={saved.get(key)!r}, the "
            f"experiment now has {now.get(key)!r}", file=path, key=f"train.{key}",
            allowed="the training keys the finished runs ran with, or a new output_dir (or "
                    "delete the finished runs to train them again)")
    if allowed is not None and record.get("start_fingerprint") not in allowed:
        raise MtdnnError(
            f"this finished run was trained from start weights "
            f"{str(record.get('start_fingerprint'))[:12]}, but arm '{cell.arm}' now starts "
            f"from weights {', '.join(str(a)[:12] for a in sorted(allowed, key=str))}",
            file=path, key=f"arms.{cell.arm}",
            allowed="the checkpoint the finished runs started from, or a new output_dir (or "
                    "delete the runs of this arm to train them again)")


# The format of a record (``result.json``). 1: records before they said their format (a
# stage record may hold one weights fingerprint and no realizations); 2: the format says
# itself; 3: the mean teacher's schedule has a default other than the paper's, so a record
# of a run with a teacher whose keys do not name the schedule ran the former default. Records
# of the experiment runner's first days (no arm, flat metrics) are older still:
# scripts/migrate_records.py moves them to this format.
RECORD_FORMAT = 3


def what_ran(run: RunDir, summary: dict[str, Any], smart: SmartConfig) -> dict[str, Any]:
    """What a run's or a stage's record keeps of how it trained, readable without the
    preset table of its day: the resolved SMART settings, the logged size of each SMART
    term, the teacher's share of the start weights at the end, the dev predictions' mean
    entropy, and the code and machines that trained it."""
    from mtdnn.modeling.objective import LOGGED_TERMS  # (torch: a run has just trained)

    return {"smart_terms": run.logged_terms(LOGGED_TERMS),
            "smart_settings": to_dict(smart) if smart.enabled else None,
            "teacher_start_share": summary.get("teacher_start_share"),
            "dev_entropy": summary["last"].get("entropy"),
            "code_version": summary.get("code_version") or code_version(),
            "machine": summary.get("machine"),
            "trained_by": summary.get("trained_by")}


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write a run's or a stage's record, in the current format."""
    atomic_write_json(path, {**record, "format": RECORD_FORMAT})


def read_record(path: Path, kind: Literal["run", "stage"] = "run") -> dict[str, Any]:
    """The one reader of records: a record of any earlier format comes back in the current
    one; one this version cannot read is an error that says what to do."""
    return upgraded(read_json(path), path, kind)


def upgraded(record: Any, path: Path | None = None,
             kind: Literal["run", "stage"] = "run") -> dict[str, Any]:
    """``record`` (as read from ``path``) in the current format."""
    version = record.get("format", 1) if isinstance(record, dict) else None
    if not isinstance(version, int) or version > RECORD_FORMAT:
        raise MtdnnError(f"a record of format {version!r}; this mtdnn reads formats 1 to "
                         f"{RECORD_FORMAT}", file=path,
                         allowed="a newer mtdnn (pip install -U mtdnn), or a record it wrote")
    if version < 3 and record.get("train_keys"):
        record = {**record, "train_keys": with_former_teacher(record["train_keys"])}
    if kind == "stage":
        if "realizations" not in record:  # format 1: the stage's one training
            record = {**record, "realizations": [
                {"weights_fingerprint": record["weights_fingerprint"],
                 "machine": record.get("machine"), "train_seconds": record.get("train_seconds")}]}
        return {**record, "format": RECORD_FORMAT}
    metrics = record.get("metrics")
    if "arm" not in record or not isinstance(metrics, dict) or not all(
            isinstance(m, dict) for m in metrics.values()):
        raise MtdnnError("a result record in an older format (metrics not keyed by task, or "
                         "no arm)", file=path,
                         allowed="records of python -m mtdnn.experiment; migrate older ones "
                                 "with python scripts/migrate_records.py")
    return {**record, "format": RECORD_FORMAT}


def realizations(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A stage record's realizations (the weights each training of it gave), oldest first."""
    return record["realizations"]


def stage_record(config: ExperimentConfig, name: str, seed: int) -> dict[str, Any] | None:
    path = find_stage_record(config, name, seed)
    if path is None:
        return None
    record = read_record(path, kind="stage")
    saved, now = without_cosmetic(record.get("train_keys") or {}), stage_train_keys(config, name)
    if saved != now:
        key = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))[0]
        raise MtdnnError(f"this stage was trained with {key}={saved.get(key)!r}, the "
                         f"experiment now has {now.get(key)!r}", file=path,
                         key=f"stages.{name}", allowed="the stage's keys as they were, or a "
                                                       "new output_dir")
    return record


def allowed_fingerprints(config: ExperimentConfig,
                         prints: dict[tuple[str, int | None], str | None]
                         ) -> dict[tuple[str, int | None], set[str | None]]:
    """(arm, stage seed) -> every start weight a finished run of it may have started from:
    the one in ``prints`` (:func:`start_fingerprints`), and for a stage each realization."""
    allowed: dict[tuple[str, int | None], set[str | None]] = {
        key: {value} for key, value in prints.items()}
    for arm in config.arms:
        stage = stage_of(config, arm)
        for seed in config.stages[stage].seeds if stage else ():
            record = stage_record(config, stage, seed)
            if record is not None:
                allowed[(arm, seed)] = {r["weights_fingerprint"] for r in realizations(record)}
    return allowed


def start_fingerprints(config: ExperimentConfig, running: bool
                       ) -> dict[tuple[str, int | None], str | None]:
    """(arm, stage seed) -> the start weights' fingerprint, where it is known now: None for
    the plain encoder; a checkpoint folder's own (which must exist to run); a stage's from
    its record."""
    prints: dict[tuple[str, int | None], str | None] = {}
    for arm, spec in config.arms.items():
        stage = stage_of(config, arm)
        if spec.init is None:
            prints[(arm, None)] = None
        elif stage is not None:
            for seed in config.stages[stage].seeds:
                record = stage_record(config, stage, seed)
                if record is not None:
                    prints[(arm, seed)] = record["weights_fingerprint"]
        elif Path(spec.init).is_dir():
            from mtdnn.runs.checkpoint import weights_fingerprint

            prints[(arm, None)] = weights_fingerprint(Path(spec.init))
        elif running:
            raise MtdnnError(f"arm '{arm}' starts from a checkpoint that is not there",
                             file=spec.init, key=f"arms.{arm}.init",
                             allowed="a checkpoint folder, stage:<name>, or null for the "
                                     "plain encoder")
    return prints


def collect(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]]
            ) -> list[dict[str, Any]]:
    """The finished runs' records; one trained with other training keys is an error."""
    allowed = allowed_fingerprints(config, start_fingerprints(config, running=False))
    records = []
    for cell in sorted(cells(config, sizes), key=lambda c: list(config.arms).index(c.arm)):
        path = find_record(config, cell.folder)
        if path is not None:
            records.append(read_record(path))
            check_record(config, cell, records[-1], path,
                         allowed.get((cell.arm, cell.stage_seed)))
    return records


# Whether a finished run's inputs are the files as they are now.
@contextlib.contextmanager
def _quiet_config() -> Iterator[None]:
    """The arms' keys warned when the experiment was loaded: not again for every run."""
    logger = logging.getLogger("mtdnn.config")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def current_inputs(config: ExperimentConfig, cell: Cell,
                   entry: dict[str, Any]) -> dict[str, str]:
    """The fingerprints of what ``cell``'s run reads, as the files are now."""
    with _quiet_config():
        resolved = resolve_config(cell_keys(config, cell, entry), origin=f"run {cell.folder}")
    return input_fingerprints(resolved, select_tasks(resolved))


def changed_inputs(record: dict[str, Any], now: dict[str, str]) -> list[str]:
    """The inputs of a finished run's record that differ now (none for a record written
    before records kept their inputs). A file that is not on this machine cannot be
    compared and is not counted as changed."""
    return [name for name, digest in (record.get("inputs") or {}).items()
            if now.get(name, "not read now") not in (digest, "missing")]


@dataclass
class InputStatus:
    """How the grid's finished runs stand against their inputs as they are now."""

    checked: int = 0
    not_fingerprinted: int = 0  # records written before records kept their inputs
    changed: dict[Path, list[str]] = field(default_factory=dict)  # record -> changed inputs
    cells: dict[Path, Cell] = field(default_factory=dict)  # record -> its run

    def summary(self) -> str:
        return (f"inputs: {self.checked} finished runs checked against their files, "
                f"{len(self.changed)} trained on inputs that have changed since; "
                f"{self.not_fingerprinted} with inputs not fingerprinted (records written before "
                "records kept their inputs)")


def input_status(config: ExperimentConfig, sizes: dict[str, dict[str, dict[str, Any]]]
                 ) -> InputStatus:
    """Every finished run's recorded inputs compared with the files now."""
    status = InputStatus()
    for cell in cells(config, sizes):
        path = find_record(config, cell.folder)
        if path is None:
            continue
        record = read_record(path)
        if not record.get("inputs"):
            status.not_fingerprinted += 1
            continue
        status.checked += 1
        changed = changed_inputs(record, current_inputs(config, cell,
                                                        sizes[cell.task][cell.subset]))
        if changed:
            status.changed[path], status.cells[path] = changed, cell
    return status


def stale_runs_paragraph(config: ExperimentConfig, status: InputStatus) -> str:
    """What a table says of runs whose inputs changed after they ran (empty if none)."""
    if not status.changed:
        return ""
    roots = [Path(config.output_dir), *([Path(config.publish_dir)] if config.publish_dir
                                        else [])]

    def folder(path: Path) -> str:
        for root in roots:
            if path.is_relative_to(root):
                return str(path.parent.relative_to(root))
        return str(path.parent)

    runs = "; ".join(f"{folder(path)} ({', '.join(names)})"
                     for path, names in sorted(status.changed.items()))
    count = len(status.changed)
    return (f"**Stale:** {count} run{'s' * (count != 1)} in this table "
            f"{'were' if count != 1 else 'was'} trained on inputs that have changed since: "
            f"{runs}. Their numbers are of data that no longer exist; `--rerun-changed` "
            "trains them again.\n\n")
