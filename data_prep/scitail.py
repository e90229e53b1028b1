"""SciTail 1.x ``tsv_format`` files → canonical JSONL.

The tsv files have no header: premise, hypothesis, label (``entails`` / ``neutral``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mtdnn.data_prep.canonical import RawRow, SplitSource
from mtdnn.data_prep.tsv import read_tsv
from mtdnn.tasks.task_def import TaskDef

SCITAIL_DIRS = ("scitail/tsv_format", "SciTailV1.1/tsv_format", "scitail/SciTailV1.1/tsv_format",
                "SciTailV1/tsv_format")
SCITAIL_COLUMNS = ("premise", "hypothesis", "label")
SPLITS = ("train", "dev", "test")


def _rows(task: TaskDef, split: str, path: Path) -> Iterator[RawRow]:
    _, rows = read_tsv(path, header=SCITAIL_COLUMNS)
    for ordinal, (line, (premise, hypothesis, label)) in enumerate(rows):
        yield RawRow(line=line, uid=f"{task.name}-{split}-{ordinal}",
                     texts={"premise": premise, "hypothesis": hypothesis}, label=label)


def scitail_sources(raw_dir: Path, tasks: dict[str, TaskDef], log=print) -> list[SplitSource]:
    """Every SciTail split present under ``raw_dir``; absent ones are reported and skipped."""
    root = next((raw_dir / d for d in SCITAIL_DIRS if (raw_dir / d).is_dir()), None)
    if root is None:
        log(f"skip scitail: no SciTail folder under {raw_dir} "
            f"(looked for {', '.join(SCITAIL_DIRS)})")
        return []
    sources = []
    for split in SPLITS:
        path = root / f"scitail_1.0_{split}.tsv"
        if not path.is_file():
            log(f"skip scitail {split}: {path} not found")
            continue
        task = tasks["scitail"]
        sources.append(SplitSource(task, split, path, _rows(task, split, path)))
    return sources
