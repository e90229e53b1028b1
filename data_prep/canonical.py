"""Canonical JSONL: row validation, staged (all-or-nothing) writing and the manifest.

A canonical file holds one JSON object per line: a stable ``uid``, the task's input
fields (``TaskDef.inputs``) and, for labelled splits, ``label`` (the label string for
classification, a float for regression).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtdnn.errors import MtdnnError, is_disk_full
from mtdnn.files import atomic_write_text, read_json, sha256_of, write_error
from mtdnn.tasks.rows import Origin, validate_row
from mtdnn.tasks.task_def import TaskDef
from mtdnn.tasks.task_type import LabelError

MANIFEST = "manifest.json"


@dataclass
class RawRow:
    """One example read from a raw file, before validation."""

    line: int
    uid: str
    texts: dict[str, Any]  # text, or a list of words (token labelling)
    label: Any  # the raw label text, or a list of tags


@dataclass
class SplitSource:
    """A raw file that becomes one canonical split of one task."""

    task: TaskDef
    split: str
    path: Path
    rows: Iterable[RawRow]
    dropped: Counter = field(default_factory=Counter)


def present_splits(root: Path, layouts: dict[str, Any], tasks: dict[str, TaskDef],
                   rows: Callable[[TaskDef, str, Path, Any], Iterable[RawRow]],
                   log: Callable[[str], None]) -> list[SplitSource]:
    """Every split of ``layouts`` (task → a layout with ``folder`` and ``splits``: split →
    file name) present under ``root``, read by ``rows``; absent ones are reported and
    skipped."""
    sources = []
    for name, layout in layouts.items():
        for split, filename in layout.splits.items():
            path = root / layout.folder / filename
            if not path.is_file():
                log(f"skip {name} {split}: {path} not found")
                continue
            sources.append(SplitSource(tasks[name], split, path,
                                       rows(tasks[name], split, path, layout)))
    return sources


def canonical_record(task: TaskDef, row: RawRow, path: Path) -> dict[str, Any]:
    """One raw row as a canonical record (texts stripped, the label in its canonical form),
    checked by the one row check every reader applies (:func:`mtdnn.tasks.rows.validate_row`);
    errors name the raw file and line."""
    origin = Origin(str(path), line=row.line)
    record: dict[str, Any] = {"uid": row.uid}
    kind = task.task_type
    record.update({name: kind.canonical_field(row.texts.get(name)) for name in task.inputs})
    # other fields the source has (e.g. a question's article) are kept, for grouping
    record.update({name: value for name, value in row.texts.items() if name not in record})
    if row.label is not None:  # a raw file's label (e.g. "0", "5.000") in canonical form
        try:
            record["label"] = task.task_type.labels.canonical(row.label, task.labels)
        except LabelError as error:
            raise origin.error(f"task '{task.name}': {error.problem}",
                               allowed=error.allowed) from None
    validate_row(task, record, origin)
    return record


def label_distribution(labels: Iterable[Any], task: TaskDef) -> dict[str, Any]:
    """Counts per label for classification; count/mean/min/max for regression scores."""
    return task.task_type.labels.summary(labels, task.labels)


def write_jsonl(records: Iterable[dict[str, Any]], path: Path) -> int:
    """Write records to ``path`` as JSON lines; returns the row count."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def update_manifest(folder: Path, entries: dict[str, Any]) -> Path:
    """Merge ``entries`` into ``folder/manifest.json`` (keyed by relative path), atomically."""
    manifest_path = folder / MANIFEST
    manifest: dict[str, Any] = {"files": {}}
    if manifest_path.exists():
        manifest = read_json(manifest_path)
    manifest.setdefault("files", {}).update(entries)
    manifest["files"] = dict(sorted(manifest["files"].items()))
    atomic_write_text(manifest_path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest_path


class Staging:
    """Stage every output of one run in a hidden folder; publish all at once on success.

    A failure anywhere leaves the output folder exactly as it was: no half-written file,
    no earlier result lost.
    """

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(dir=out_dir, prefix=".staging-"))
        except OSError as error:
            raise write_error(out_dir, error) from None
        self.files: list[str] = []

    def path(self, relative: str) -> Path:
        staged = self.dir / relative
        staged.parent.mkdir(parents=True, exist_ok=True)
        self.files.append(relative)
        return staged

    def publish(self, manifest_entries: dict[str, Any]) -> Path:
        for relative in self.files:
            target = self.out_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.dir / relative, target)
        return update_manifest(self.out_dir, manifest_entries)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, _: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        if error is not None and not isinstance(error, MtdnnError) and (
                isinstance(error, OSError) or is_disk_full(error)):
            raise write_error(self.out_dir, error) from None


def convert_split(source: SplitSource, staging: Staging, out_name: str) -> dict[str, Any]:
    """Validate and write one split into ``staging``; return its manifest entry."""
    labels: list[Any] = []

    def records() -> Iterator[dict[str, Any]]:
        seen: set[str] = set()
        for row in source.rows:
            record = canonical_record(source.task, row, source.path)
            if record["uid"] in seen:
                raise MtdnnError(f"duplicate id {record['uid']!r}", file=source.path,
                                 line=row.line, allowed="unique ids within a file")
            seen.add(record["uid"])
            if "label" in record:
                labels.append(record["label"])
            yield record

    rows = write_jsonl(records(), staging.path(out_name))
    if rows == 0:
        raise MtdnnError(f"task '{source.task.name}': no examples in split '{source.split}'",
                         file=source.path, allowed="a file with at least one example")
    entry = {
        "task": source.task.name,
        "split": source.split,
        "rows": rows,
        "labelled": bool(labels),
        "label_distribution": label_distribution(labels, source.task),
        "source": str(source.path),
        "source_sha256": sha256_of(source.path),
    }
    if source.dropped:
        entry["dropped"] = dict(source.dropped)
    return entry
