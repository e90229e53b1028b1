"""Canonical JSONL → the validated columns of a task's examples (``uid``, its input
fields, ``labels``), before any tokenizer is involved.

Reading needs neither torch nor a model, so a command can check its input (every row,
errors naming the line) before it loads the weights that will score it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from mtdnn.errors import MtdnnError
from mtdnn.files import read_jsonl
from mtdnn.tasks.rows import Origin, validate_row
from mtdnn.tasks.task_def import TaskDef
from mtdnn.tasks.task_type import RowError


def check_exists(path: Path, task: TaskDef) -> None:
    if not path.is_file():
        raise MtdnnError(f"task '{task.name}': data file not found", file=path,
                         allowed="run `python -m mtdnn.data_prep` or set tasks.<task>.train/dev")


def _read_columns_fast(path: Path, task: TaskDef, require_labels: bool
                       ) -> dict[str, list] | None:
    """The columns of a well-formed file via Arrow's JSON reader (what HF ``datasets`` uses
    for JSON). ``None`` for anything unusual: the line-by-line reader then reads the file
    and its errors name the line."""
    try:
        return _arrow_columns(pa_json.read_json(path), task, require_labels)
    except (pa.ArrowException, OSError, UnicodeDecodeError):  # Arrow reads bytes unchecked
        return None


def _arrow_columns(table: pa.Table, task: TaskDef, require_labels: bool
                   ) -> dict[str, list] | None:
    fields = ("uid", *task.inputs, *task.task_type.extra_fields)
    if len(table) == 0 or any(name not in table.column_names for name in fields):
        return None
    columns: dict[str, list] = {}
    for name in fields:
        column = table.column(name)
        if not pa.types.is_string(column.type) or column.null_count:
            return None
        if name != "uid" and pc.any(pc.equal(pc.utf8_trim_whitespace(column), "")).as_py():
            return None
        columns[name] = column.to_pylist()
    label = table.column("label") if "label" in table.column_names else None
    if label is None or label.null_count == len(table):
        return None if require_labels else columns
    if label.null_count:
        return None
    values = task.task_type.labels.arrow(label, task.labels)
    if values is None:
        return None
    return {**columns, "labels": values}


def read_examples(path: Path, task: TaskDef, require_labels: bool) -> dict[str, list]:
    """Columns of a canonical JSONL file, validated against the task (each row, then across
    rows, e.g. a ranking task's groups); errors name the line."""
    fast = _read_columns_fast(path, task, require_labels)
    if fast is not None:
        try:
            task.task_type.check_columns(task, fast)
            return fast
        except RowError:
            pass  # read again line by line: the error then names the file's line
    columns, lines = _read_lines(path, task, require_labels)
    try:
        task.task_type.check_columns(task, columns)
    except RowError as error:
        raise MtdnnError(f"task '{task.name}': {error.problem}", file=path,
                         line=lines[error.index], allowed=error.allowed) from None
    return columns


def _read_lines(path: Path, task: TaskDef, require_labels: bool
                ) -> tuple[dict[str, list], list[int]]:
    fields = (*task.inputs, *task.task_type.extra_fields)
    columns: dict[str, list] = {"uid": [], **{name: [] for name in fields}, "labels": []}
    lines = []
    for line, obj in read_jsonl(path):
        label = validate_row(task, obj, Origin(str(path), line=line), require_labels)
        for name in fields:
            columns[name].append(obj[name])
        lines.append(line)
        columns["uid"].append(str(obj.get("uid", f"{path.stem}-{line}")))
        if label is not None:
            columns["labels"].append(label)
    if not columns["uid"]:
        raise MtdnnError(f"task '{task.name}': the file has no examples", file=path,
                         allowed="a JSONL file with at least one example")
    if not columns["labels"]:
        del columns["labels"]
    elif len(columns["labels"]) != len(columns["uid"]):
        raise MtdnnError(f"task '{task.name}': some examples have labels and some do not",
                         file=path, allowed="labels on all examples or on none")
    return columns, lines
