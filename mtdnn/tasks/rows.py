"""A canonical row: where it came from, and the one check every reader applies to it.

A canonical example is a mapping with a ``uid``, the task's input fields (non-empty text)
and, in a labelled split, a ``label`` the task can take. ``data_prep``'s converters
(``data_prep/canonical.py``), the user-data sources (:mod:`mtdnn.data.sources`) and the JSONL
reader (:mod:`mtdnn.data.tokenized`) all call :func:`validate_row`, so a bad row gets the
same message
wherever it is found, naming the user's file and row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mtdnn.errors import MtdnnError
from mtdnn.tasks.task_type import LabelError, TaskDef


@dataclass(frozen=True)
class Origin:
    """Where a row came from: a file's line (JSONL, CSV, TSV), a Parquet file's row (from
    1), or a dataset split's index (from 0)."""

    source: str
    line: int | None = None
    row: int | None = None
    index: int | None = None

    def error(self, problem: str, key: str | None = None,
              allowed: str | None = None) -> MtdnnError:
        if self.row is not None:
            problem = f"row {self.row}: {problem}"
        elif self.index is not None:
            problem = f"index {self.index}: {problem}"
        return MtdnnError(problem, file=self.source, line=self.line, key=key, allowed=allowed)

    def default_uid(self) -> str:
        number = self.line if self.line is not None else \
            self.row if self.row is not None else (self.index or 0) + 1
        return f"row{number}"


def validate_row(task: TaskDef, example: dict[str, Any], origin: Origin,
                 require_label: bool = False) -> Any:
    """Check one canonical example against ``task`` (its type checks the fields); return its
    parsed label (an index for classification, a score for regression, tag indices for
    token labelling), or ``None`` when it has none."""
    kind = task.task_type
    kind.check_fields(task, example, origin)
    label = example.get("label")
    if label is None:
        if require_label:
            raise origin.error(f"task '{task.name}': example has no label",
                               allowed="a 'label' on every training and dev example")
        return None
    try:
        return kind.parse_label(task, label, example)
    except LabelError as error:
        raise origin.error(f"task '{task.name}': {error.problem}",
                           allowed=error.allowed) from None
