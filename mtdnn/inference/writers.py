"""What predictions become: per-example records, the mean of an ensemble, and the JSON lines,
CSV and GLUE submission files they are written to (the format by the file's extension, in
any case), with the metrics file beside them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mtdnn.data.sources import shown_name
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_write_text
from mtdnn.tasks.task_def import TaskDef


def ensemble(task: TaskDef, predictions: list[Any]) -> Any:
    """The mean of several models' predictions, as the task's type averages them (class
    probabilities, scores)."""
    return task.task_type.ensemble(predictions)


def prediction_records(task: TaskDef, dataset: Any, predicted: Any) -> list[dict[str, Any]]:
    """One output object per example: uid, then the prediction as the task's type writes it
    (a label and its probabilities, a score, entities...)."""
    return task.task_type.records(task, predicted, dataset)


def glue_index(uid: str, path: str, line: int) -> str:
    """The GLUE test index at the end of a uid like ``rte-test-17``; ``path`` names the
    input (the user's own file, not a converted copy of it)."""
    index = uid.rsplit("-", 1)[-1]
    if not index.isdigit():
        shown = shown_name(path)
        if shown != str(path) and uid.startswith("row") and uid[3:].isdigit():
            line = int(uid[3:])  # a converted file's uid names the line of the user's file
        raise MtdnnError(f"uid {uid!r} does not end in a GLUE index", file=shown,
                         line=line, allowed="uids written by data_prep (e.g. rte-test-17), or "
                                            "a GLUE test.tsv read with --columns '{uid: index}'")
    return index


FORMATS = ("jsonl", "csv", "glue")


def output_format(path: Path, fmt: str | None) -> str:
    """``fmt``, else what the output's name says, in any case: ``.csv`` (``.CSV``) is CSV,
    anything else JSONL."""
    if fmt is None:
        return "csv" if path.suffix.lower() == ".csv" else "jsonl"
    if fmt not in FORMATS:
        raise MtdnnError(f"unknown output format {fmt!r}", key="--format",
                         allowed=", ".join(FORMATS))
    return fmt


def csv_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prediction records as flat CSV rows: ``uid``, ``prediction`` (or ``score``) and one
    ``p(<label>)`` column per label; with several tasks, each column prefixed ``<task>.``."""
    def flat(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        row = {}
        for key, value in record.items():
            if isinstance(value, dict) and key == "probabilities":
                row.update({f"{prefix}p({label})": p for label, p in value.items()})
            elif isinstance(value, dict):
                row.update(flat(value, f"{key}."))
            elif isinstance(value, list):  # tags, entities: one JSON cell
                row[f"{prefix}{key}"] = json.dumps(value, ensure_ascii=False)
            else:
                row[f"{prefix}{key}"] = value
        return row

    return [flat(record) for record in records]


def write_predictions(path: Path, records: list[dict[str, Any]], fmt: str,
                      source: Path) -> None:
    """JSON lines, CSV (:func:`csv_rows`), or a GLUE submission TSV
    (``index<TAB>prediction``), written atomically."""
    if fmt == "glue":
        if records and "prediction" not in records[0]:
            raise MtdnnError("these predictions have no single 'prediction' per example to "
                             "write in a GLUE submission file", file=path, key="--format",
                             allowed="--format jsonl or csv")
        rows = [f"{glue_index(r['uid'], str(source), n)}\t{r['prediction']}"
                for n, r in enumerate(records, start=1)]
        text = "index\tprediction\n" + "".join(row + "\n" for row in rows)
    elif fmt == "csv":
        import csv
        import io

        rows = csv_rows(records)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["uid"],
                                lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buffer.getvalue()
    else:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    atomic_write_text(path, text)


def metrics_path(output_path: Path) -> Path:
    """Where the metrics of a labelled prediction go: beside the output."""
    return output_path.with_name(output_path.name + ".metrics.json")
