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

from mtdnn.data_prep.canonical import RawRow, SplitSource, present_splits
from mtdnn.errors import MtdnnError
from mtdnn.tasks.iob import iob1_to_iob2, iob2_problem
from mtdnn.tasks.task_def import TaskDef


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


def read_sentences(path: Path, layout: TaggingLayout
                   ) -> Iterator[tuple[list[int], list[str], list[str]]]:
    """(each word's line, words, tags) per sentence; an odd line is an error naming it."""
    words: list[str] = []
    tags: list[str] = []
    lines: list[int] = []
    try:
        handle = open(path, encoding="utf-8")
    except OSError as error:
        raise MtdnnError(f"cannot read file: {error.strerror}", file=path) from None
    with handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if words:
                    yield lines, words, tags
                words, tags, lines = [], [], []
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
            lines.append(number)
            words.append(parts[0])
            tags.append(parts[-1].strip())
        if words:
            yield lines, words, tags


def _rows(task: TaskDef, split: str, path: Path, layout: TaggingLayout) -> Iterator[RawRow]:
    """Each sentence as a raw row (at its first word's line); a tag outside the task's
    list, or one IOB2 does not allow, is an error naming the word's own line."""
    for ordinal, (lines, words, tags) in enumerate(read_sentences(path, layout)):
        for line, tag in zip(lines, tags, strict=True):
            if tag not in task.labels:
                raise MtdnnError(f"task '{task.name}': tag {tag!r} is not one of the task's "
                                 "tags", file=path, line=line, allowed=", ".join(task.labels))
        if layout.iob1:
            tags = iob1_to_iob2(tags)
        problem = iob2_problem(tags)
        if problem:
            raise MtdnnError(f"task '{task.name}': {problem[1]}", file=path,
                             line=lines[problem[0]], allowed="valid IOB2: an I-TYPE follows "
                             "a B-TYPE or I-TYPE of its type")
        yield RawRow(line=lines[0], uid=f"{task.name}-{split}-{ordinal}",
                     texts={task.inputs[0]: words}, label=tags)


def tagging_sources(raw_dir: Path, tasks: dict[str, TaskDef], log=print) -> list[SplitSource]:
    """Every CoNLL-2003 and WNUT-17 split present under ``raw_dir``; absent ones are
    reported and skipped."""
    return present_splits(raw_dir, LAYOUTS, tasks, _rows, log)
