"""GLUE tsv files → canonical JSONL.

Columns are found by header name, never by position. The only headerless files in the
official release are CoLA's train and dev; their column names are given here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mtdnn.data_prep.canonical import RawRow, SplitSource, present_splits
from mtdnn.data_prep.tsv import column_index, read_tsv
from mtdnn.tasks.task_def import TaskDef


@dataclass(frozen=True)
class GlueLayout:
    """Where one GLUE task's raw files are and which columns hold what."""

    folder: str
    splits: dict[str, str]
    texts: dict[str, str]  # canonical field -> raw column name
    label: str
    index: str = "index"  # id column when present; otherwise the row number is the id
    headerless: tuple[str, ...] = ()  # column names of files without a header


_TRAIN_DEV_TEST = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}

GLUE_LAYOUTS: dict[str, GlueLayout] = {
    "cola": GlueLayout("CoLA", _TRAIN_DEV_TEST, {"sentence": "sentence"}, "label",
                       headerless=("source", "label", "original_label", "sentence")),
    "sst2": GlueLayout("SST-2", _TRAIN_DEV_TEST, {"sentence": "sentence"}, "label"),
    "mrpc": GlueLayout("MRPC", _TRAIN_DEV_TEST,
                       {"sentence1": "#1 String", "sentence2": "#2 String"}, "Quality"),
    "stsb": GlueLayout("STS-B", _TRAIN_DEV_TEST,
                       {"sentence1": "sentence1", "sentence2": "sentence2"}, "score"),
    "qnli": GlueLayout("QNLI", _TRAIN_DEV_TEST,
                       {"question": "question", "sentence": "sentence"}, "label"),
    "mnli": GlueLayout("MNLI",
                       {"train": "train.tsv", "dev_matched": "dev_matched.tsv",
                        "dev_mismatched": "dev_mismatched.tsv",
                        "test_matched": "test_matched.tsv",
                        "test_mismatched": "test_mismatched.tsv"},
                       {"premise": "sentence1", "hypothesis": "sentence2"}, "gold_label"),
    "rte": GlueLayout("RTE", _TRAIN_DEV_TEST,
                      {"sentence1": "sentence1", "sentence2": "sentence2"}, "label"),
    "wnli": GlueLayout("WNLI", _TRAIN_DEV_TEST,
                       {"sentence1": "sentence1", "sentence2": "sentence2"}, "label"),
}
GLUE_DIR_NAMES = ("glue", "glue_data", "GLUE")


def _has_header(path: Path, layout: GlueLayout) -> bool:
    if not layout.headerless:
        return True
    with open(path, encoding="utf-8-sig") as handle:
        first = handle.readline().rstrip("\r\n").split("\t")
    return set(layout.texts.values()) <= set(first)


def _rows(task: TaskDef, split: str, path: Path, layout: GlueLayout) -> Iterator[RawRow]:
    header = None if _has_header(path, layout) else layout.headerless
    columns, rows = read_tsv(path, header)
    text_at = {field: column_index(columns, column, path) for field, column in layout.texts.items()}
    label_at = columns.index(layout.label) if layout.label in columns else None
    index_at = columns.index(layout.index) if layout.index in columns else None
    for ordinal, (line, fields) in enumerate(rows):
        row_id = fields[index_at] if index_at is not None else str(ordinal)
        yield RawRow(line=line, uid=f"{task.name}-{split}-{row_id}",
                     texts={field: fields[at] for field, at in text_at.items()},
                     label=fields[label_at] if label_at is not None else None)


def find_glue_root(raw_dir: Path) -> Path | None:
    """The GLUE folder under ``raw_dir`` (``glue/``, ``glue_data/``) or ``raw_dir`` itself."""
    for name in GLUE_DIR_NAMES:
        if (raw_dir / name).is_dir():
            return raw_dir / name
    if any((raw_dir / layout.folder).is_dir() for layout in GLUE_LAYOUTS.values()):
        return raw_dir
    return None


def glue_sources(raw_dir: Path, tasks: dict[str, TaskDef], log=print) -> list[SplitSource]:
    """Every GLUE split present under ``raw_dir``; absent ones are reported and skipped."""
    root = find_glue_root(raw_dir)
    if root is None:
        log(f"skip glue: no GLUE folder under {raw_dir} (looked for {', '.join(GLUE_DIR_NAMES)})")
        return []
    return present_splits(root, GLUE_LAYOUTS, tasks, _rows, log)
