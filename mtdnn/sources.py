"""Where a task's examples come from, in any of the forms users have them.

- canonical JSONL (``data_prep``'s output): read as it is;
- a CSV, TSV or Parquet file, its columns mapped to the task's fields with
  ``tasks.<task>.columns`` (``{sentence1: premise, label: gold}``; unmapped fields keep
  their names);
- a Hugging Face dataset, ``{dataset: glue, config: rte, split: train}``, loaded with
  ``datasets.load_dataset`` (a hub name, or a local folder of data files).

Anything but canonical JSONL is converted once into canonical JSONL under the cache folder
(keyed by the source's content and the column mapping), so the rest of the pipeline (its
checks, its tokenization cache) reads one format. Labels may be the task's label names or
their positions (integers, as a ``ClassLabel`` column holds them); a ``ClassLabel`` must
have as many names as the task has labels. Errors name the source file and row.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_write_text, read_text, sha256_of
from mtdnn.task_def import TaskDef

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}


@dataclass(frozen=True)
class DatasetSource:
    """A split of a Hugging Face dataset: ``datasets.load_dataset(dataset, config,
    split=split)``."""

    dataset: str
    config: str | None = None
    split: str = "train"


Source = str | DatasetSource


def canonical_path(source: Source, task: TaskDef, columns: dict[str, str],
                   cache_dir: Path) -> Path:
    """A canonical JSONL file holding ``source``'s examples for ``task``."""
    if isinstance(source, str) and Path(source).suffix in (".jsonl", ".json") and not columns:
        return Path(source)
    rows, where, identity = _rows(source)
    key = hashlib.sha256(json.dumps([identity, sorted(columns.items()), task.inputs,
                                     task.labels]).encode()).hexdigest()[:20]
    target = cache_dir / "sources" / f"{task.name}-{key}.jsonl"
    if not target.is_file():
        lines = (json.dumps(example, ensure_ascii=False) + "\n"
                 for example in _canonical(rows, task, columns, where))
        atomic_write_text(target, "".join(lines))
    return target


def _rows(source: Source) -> tuple[Iterator[tuple[int, dict[str, Any]]], str, str]:
    """(row number, row) pairs, what to call the source in errors, and its identity."""
    if isinstance(source, DatasetSource):
        return _dataset_rows(source)
    path = Path(source)
    if not path.is_file():
        raise MtdnnError("data file not found", file=path,
                         allowed="a .jsonl, .csv, .tsv or .parquet file, or "
                                 "{dataset: NAME, config: CONFIG, split: SPLIT}")
    if path.suffix in TABLE_SUFFIXES:
        reader = csv.DictReader(read_text(path).splitlines(),
                                delimiter=TABLE_SUFFIXES[path.suffix])
        rows = ((number, row) for number, row in enumerate(reader, start=2))  # 1: the header
        return rows, str(path), sha256_of(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        return enumerate(table.to_pylist(), start=1), str(path), sha256_of(path)
    if path.suffix in (".jsonl", ".json"):
        from mtdnn.files import read_jsonl

        return read_jsonl(path), str(path), sha256_of(path)
    raise MtdnnError(f"unknown data file type '{path.suffix}'", file=path,
                     allowed=".jsonl, .csv, .tsv, .parquet, or a Hugging Face dataset "
                             "{dataset: NAME, config: CONFIG, split: SPLIT}")


def _dataset_rows(source: DatasetSource) -> tuple[Iterator[tuple[int, dict[str, Any]]],
                                                  str, str]:
    import datasets

    where = f"dataset {source.dataset}" + (f"/{source.config}" if source.config else "") + \
        f" split {source.split}"
    try:
        dataset = datasets.load_dataset(source.dataset, source.config, split=source.split)
    except (OSError, ValueError, datasets.exceptions.DatasetNotFoundError) as error:
        # OSError: a missing folder, and a hub name without network (ConnectionError)
        raise MtdnnError(f"cannot load {where}: {str(error).splitlines()[0]}",
                         file=source.dataset, key="dataset",
                         allowed="a Hugging Face dataset name (needs network unless cached), "
                                 "or a local folder of data files, with an existing config "
                                 "and split") from None
    label = dataset.features.get("label")
    names = getattr(label, "names", None)
    rows = ((number, {**row, "_label_names": names})
            for number, row in enumerate(dataset, start=1))
    return rows, where, dataset._fingerprint


def _canonical(rows: Iterator[tuple[int, dict[str, Any]]], task: TaskDef,
               columns: dict[str, str], where: str) -> Iterator[dict[str, Any]]:
    unknown = [f for f in columns if f not in ("uid", "label", *task.inputs)]
    if unknown:
        raise MtdnnError(f"task '{task.name}' has no field '{unknown[0]}'", key="columns",
                         allowed=", ".join(("uid", *task.inputs, "label")))
    count = 0
    for number, row in rows:
        names = row.pop("_label_names", None)
        if names is not None and len(names) != len(task.labels):
            raise MtdnnError(f"its ClassLabel has {len(names)} names {names}, task "
                             f"'{task.name}' has {len(task.labels)} labels", file=where,
                             key="label", allowed="a task whose labels match the "
                                                  "ClassLabel's names by position")
        example = {"uid": str(row.get(columns.get("uid", "uid")) or f"row{number}")}
        for field in task.inputs:
            column = columns.get(field, field)
            if column not in row:
                raise MtdnnError(f"no column '{column}' for task '{task.name}' field "
                                 f"'{field}'", file=where, line=number,
                                 key=f"columns.{field}",
                                 allowed=f"its columns: {', '.join(map(str, row))}")
            example[field] = row[column]
        label = row.get(columns.get("label", "label"))
        if label is not None and label != "":
            example["label"] = _label(label, task)
        count += 1
        yield example
    if not count:
        raise MtdnnError(f"task '{task.name}': the source has no examples", file=where,
                         allowed="at least one example")


def _label(value: Any, task: TaskDef) -> Any:
    """A table cell's label: text from CSV becomes a number where the task reads one (a
    score, or a position that is not itself a label name)."""
    if not isinstance(value, str) or value in task.labels:
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    if not task.task_type.labels.has_names:
        return number
    return int(number) if number.is_integer() else value
