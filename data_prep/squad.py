"""SQuAD v1.1's official JSON → canonical JSONL: one row per question.

``data[].paragraphs[].context`` and ``.qas[]`` (``id``, ``question``, ``answers[]`` with
``text`` and ``answer_start``) become ``{"uid": id, "article": title, "question",
"context", "label": [{"text", "start"}, ...]}``. A start that does not point at its text is
an error naming the file and the question id. The train file (``train-v1.1.json``) and the
dev file (``dev-v1.1.json``) are read alike; where only dev is at hand,
``data_prep groups --task squad --key article --keep-all`` deals whole articles to a train
and a dev split, so no context is on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from mtdnn.data_prep.canonical import RawRow, SplitSource
from mtdnn.errors import MtdnnError
from mtdnn.tasks.task_def import TaskDef

SPLITS = {"train": "train-v1.1.json", "dev": "dev-v1.1.json"}


def _rows(task: TaskDef, path: Path) -> Iterator[RawRow]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise MtdnnError(f"not a SQuAD JSON file ({error})", file=path,
                         allowed="the official SQuAD v1.1 JSON: data[].paragraphs[].qas[]"
                         ) from None
    ordinal = 0
    for article in data:
        for paragraph in article.get("paragraphs", []):
            context = paragraph.get("context", "")
            for qa in paragraph.get("qas", []):
                ordinal += 1
                answers = [{"text": a.get("text", ""), "start": a.get("answer_start")}
                           for a in qa.get("answers", [])]
                yield RawRow(line=ordinal, uid=str(qa.get("id", f"q{ordinal}")),
                             texts={"question": qa.get("question", ""), "context": context,
                                    "article": article.get("title", "")},
                             label=answers or None)


def squad_sources(raw_dir: Path, tasks: dict[str, TaskDef], log=print) -> list[SplitSource]:
    """Every SQuAD v1.1 split present under ``raw_dir/squad``."""
    sources = []
    for split, name in SPLITS.items():
        path = raw_dir / "squad" / name
        if not path.is_file():
            log(f"skip squad {split}: {path} not found")
            continue
        sources.append(SplitSource(tasks["squad"], split, path, _rows(tasks["squad"], path)))
    return sources
