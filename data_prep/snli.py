"""SNLI 1.0 JSON lines → canonical JSONL.

Pairs without a gold label (``gold_label == "-"``: the annotators did not agree) are
dropped and counted, as in every published SNLI result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from mtdnn.data_prep.canonical import RawRow, SplitSource
from mtdnn.errors import MtdnnError
from mtdnn.files import read_jsonl
from mtdnn.tasks.task_def import TaskDef

SNLI_DIR_NAMES = ("snli", "snli_1.0")
# The shared development data holds a random sample of train under its own name.
SNLI_FILES = {
    "train": ("snli_1.0_train.jsonl", "snli_1.0_train_sample.jsonl"),
    "dev": ("snli_1.0_dev.jsonl",),
    "test": ("snli_1.0_test.jsonl",),
}
NO_GOLD_LABEL = "-"


def _rows(task: TaskDef, split: str, path: Path, dropped: Counter) -> Iterator[RawRow]:
    for ordinal, (line, obj) in enumerate(read_jsonl(path)):
        missing = [key for key in ("gold_label", "sentence1", "sentence2") if key not in obj]
        if missing:
            raise MtdnnError(f"missing field '{missing[0]}'", file=path, line=line,
                             allowed="objects with gold_label, sentence1, sentence2")
        if obj["gold_label"] == NO_GOLD_LABEL:
            dropped["no_gold_label"] += 1
            continue
        row_id = obj.get("pairID", ordinal)
        yield RawRow(line=line, uid=f"{task.name}-{split}-{row_id}",
                     texts={"premise": obj["sentence1"], "hypothesis": obj["sentence2"]},
                     label=str(obj["gold_label"]))


def snli_sources(raw_dir: Path, tasks: dict[str, TaskDef], log=print) -> list[SplitSource]:
    """Every SNLI split present under ``raw_dir``; absent ones are reported and skipped."""
    root = next((raw_dir / n for n in SNLI_DIR_NAMES if (raw_dir / n).is_dir()), None)
    if root is None:
        log(f"skip snli: no SNLI folder under {raw_dir} (looked for {', '.join(SNLI_DIR_NAMES)})")
        return []
    sources = []
    for split, names in SNLI_FILES.items():
        path = next((root / n for n in names if (root / n).is_file()), None)
        if path is None:
            log(f"skip snli {split}: {root / names[0]} not found")
            continue
        if path.name != names[0]:
            log(f"snli {split}: using {path.name} ({names[0]} not found)")
        source = SplitSource(tasks["snli"], split, path, [])
        source.rows = _rows(tasks["snli"], split, path, source.dropped)
        sources.append(source)
    return sources
