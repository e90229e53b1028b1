"""CoNLL-style tagging files → canonical JSONL: one word a line, its tag in the last column,
a blank line between sentences.

- **CoNLL-2003** (``conll2003/eng.train``, ``eng.testa``, ``eng.testb``): ``word POS chunk
  NER``, space-separated, with ``-DOCSTART-`` lines between documents. The original release
  tags in **IOB1** (an entity begins with ``I-`` unless it follows one of its own type);
  each sentence is converted to IOB2 here (:func:`iob1_to_iob2`), so every entity begins
  with ``B-``. Its few ``B-`` tags that follow another type (two ``B-MISC`` in train) begin
  an entity in both schemes and stay.
- **WNUT-17** (``wnut17/wnut17train.conll``, ``emerging.dev.conll``, ``emerging.test.annotated``):
  ``word<TAB>tag``, already IOB2; a tag IOB2 does not allow is an error naming the line.

A canonical row is ``{"uid", "tokens": [words], "label": [tags]}``; its line in the raw file
is the sentence's first word.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mtdnn.data_prep.canonical import RawRow, SplitSource
from mtdnn.errors import MtdnnError
from mtdnn.tasks.task_def import TaskDef
from mtdnn.tasks.types.token_classification import iob1_to_iob2


@dataclass(frozen=True)
class TaggingLayout:
    folder: str
    splits: dict[str, str]
    separator: str | None  # None: any whitespace
    columns: int
    iob1: bool


LAYOUTS = {
    "conll2003": TaggingLayout("conll2003", {"train": "eng.train", "dev": "eng.testa",
                                             "test": "eng.testb"}, None, 4, iob1=True),
    "wnut17": TaggingLayout("wnut17", {"train": "wnut17train.conll",
                                       "dev": "emerging.dev.conll",
                                       "test": "emerging.test.annotated"}, "\t", 2, iob1=False),
}


def read_sentences(path: Path, layout: TaggingLayout) -> Iterator[tuple[int, list[str], list[str]]]:
    """(line of the first word, words, tags) per sentence; an odd line is an error naming it."""
    words: list[str] = []
    tags: list[str] = []
    first = 0
    try:
        handle = open(path, encoding="utf-8")
    except OSError as error:
        raise MtdnnError(f"cannot read file: {error.strerror}", file=path) from None
    with handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if words:
                    yield first, words, tags
                words, tags = [], []
                continue
            parts = line.split(layout.separator)
            if parts[0] == "-DOCSTART-":
                continue
            if len(parts) != layout.columns or not parts[0].strip():
                shape = "word POS chunk NER (space-separated)" if layout.columns == 4 \
                    else "word<TAB>tag"
                raise MtdnnError(f"expected {layout.columns} columns, found {len(parts)}",
                                 file=path, line=number, allowed=f"lines of {shape}, a blank "
                                                                  "line between sentences")
            if not words:
                first = number
            words.append(parts[0])
            tags.append(parts[-1].strip())
        if words:
            yield first, words, tags


def _rows(task: TaskDef, split: str, path: Path, layout: TaggingLayout) -> Iterator[RawRow]:
    for ordinal, (line, words, tags) in enumerate(read_sentences(path, layout)):
        yield RawRow(line=line, uid=f"{task.name}-{split}-{ordinal}",
                     texts={task.inputs[0]: words},
                     label=iob1_to_iob2(tags) if layout.iob1 else tags)


def tagging_sources(raw_dir: Path, tasks: dict[str, TaskDef], log=print) -> list[SplitSource]:
    """Every CoNLL-2003 and WNUT-17 split present under ``raw_dir``; absent ones are
    reported and skipped."""
    sources = []
    for name, layout in LAYOUTS.items():
        for split, filename in layout.splits.items():
            path = raw_dir / layout.folder / filename
            if not path.is_file():
                log(f"skip {name} {split}: {path} not found")
                continue
            sources.append(SplitSource(tasks[name], split, path,
                                       _rows(tasks[name], split, path, layout)))
    return sources
