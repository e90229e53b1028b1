"""Where a task's examples come from, in any of the forms users have them.

- canonical JSONL (``data_prep``'s output): read as it is;
- a CSV, TSV or Parquet file, its columns mapped to the task's fields with
  ``tasks.<task>.columns`` (``{sentence1: premise, label: gold}``; unmapped fields keep
  their names);
- a Hugging Face dataset, ``{dataset: glue, config: rte, split: train}``, loaded with
  ``datasets.load_dataset`` (a hub name, or a local folder of data files).

Anything but canonical JSONL is converted once into canonical JSONL under the cache folder
(keyed by the source's content and the column mapping), so the rest of the pipeline (its
checks, its tokenization cache) reads one format. Every row is validated while it is
converted (:func:`mtdnn.tasks.rows.validate_row`), so an error names the user's file and row (the
CSV line, the Parquet row, the dataset split and index), never the cached copy.

How files are read:

- CSV follows the spreadsheet conventions: quoted fields may hold commas, quotes and
  newlines; a UTF-8 byte-order mark (Excel's "CSV UTF-8") is dropped.
- TSV is read as GLUE writes it: unquoted, one row per line, so a ``"`` inside a text is
  ordinary data.
- Labels are matched **by name** where the source carries names (a ``ClassLabel``, or a
  Parquet file written by ``datasets``): a dataset whose names are in another order than
  the task's ``labels`` is mapped correctly. Integer positions are used only where there
  are no names; whole floats (``1.0``, what pandas writes) count as integers.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtdnn.config.train_config import DatasetSource, TrainConfig
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_write_text, sha256_of, unchanged_stamp
from mtdnn.tasks.rows import Origin, validate_row
from mtdnn.tasks.task_def import TaskDef, definition_fingerprint

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}
SOURCES_FORMAT = 2  # bump when a source converts differently
SOURCE_HINT = ("a .jsonl, .csv, .tsv or .parquet file, or "
               "{dataset: NAME, config: CONFIG, split: SPLIT}")


Source = str | DatasetSource
TaskFiles = tuple[Path, Path | None]  # a task's canonical train file and dev file (if any)


@dataclass
class SourceRows:
    """A source opened for reading: its rows with where each came from, the label names it
    carries (if any), and an identity for the cache key."""

    rows: Iterator[tuple[Origin, dict[str, Any]]]
    name: str  # what errors call the source
    identity: str
    label_names: list[str] | None = None
    columns: list[str] | None = None  # known before reading rows (Parquet, datasets)


def canonical_path(source: Source, task: TaskDef, columns: dict[str, str],
                   cache_dir: Path, require_labels: bool = False) -> Path:
    """A canonical JSONL file holding ``source``'s examples for ``task`` (each with a label
    if ``require_labels``: training and dev data)."""
    if isinstance(source, str) and not columns and Path(source).suffix.lower() in (".jsonl",
                                                                                    ".json"):
        return Path(source)
    opened = open_source(source, label_column=columns.get("label", "label"))
    # The source's name is part of the key: the copy's errors name the file the user gave,
    # not another path that once held the same bytes.
    key = hashlib.sha256(json.dumps([SOURCES_FORMAT, opened.identity, opened.name,
                                     sorted(columns.items()), task.inputs, task.labels,
                                     require_labels]).encode()).hexdigest()[:20]
    target = cache_dir / "sources" / f"{task.name}-{key}.jsonl"
    shown = target.with_suffix(".source")  # what logs and errors call the cached copy
    if not shown.is_file():
        atomic_write_text(shown, opened.name)
    if not target.is_file():
        lines = (json.dumps(example, ensure_ascii=False) + "\n"
                 for example in canonical_rows(opened, task, columns, require_labels))
        atomic_write_text(target, "".join(lines))
    return target


def shown_name(path: str | Path) -> str:
    """What a canonical file is called in logs and errors: the user's own file (its CSV,
    Parquet file or dataset split) when it is a converted copy in the cache, else itself."""
    shown = Path(path).with_suffix(".source")
    return shown.read_text(encoding="utf-8") if shown.is_file() else str(path)


def task_sources(config: TrainConfig, task: str) -> tuple[Source, Source | None]:
    """The train source and the dev source (``None`` if absent) of ``task``: its own, or
    ``<data_dir>/<task>/{train,dev}.jsonl``."""
    spec = config.tasks[task]
    default = Path(config.data_dir) / task
    train = spec.train or str(default / "train.jsonl")
    if spec.dev:
        return train, spec.dev
    return train, (str(default / "dev.jsonl") if (default / "dev.jsonl").is_file() else None)


def canonical_files(config: TrainConfig, tasks: dict[str, TaskDef]) -> dict[str, TaskFiles]:
    """Each task's train and dev data as canonical JSONL files, converted into the cache
    where a source is another form (every example needs its label). ``columns`` maps the
    train and dev files named in ``tasks.<task>``, not the default ``<data_dir>`` ones."""
    files, cache = {}, config.cache_folder
    for name, task in tasks.items():
        train, dev = task_sources(config, name)
        spec = config.tasks[name]
        # the mapping is for the files the user names; the default <data_dir> files are
        # data_prep's canonical JSONL and are read as they are
        files[name] = tuple(
            source and canonical_path(source, task, spec.columns if named else {}, cache,
                                      require_labels=True)
            for source, named in ((train, spec.train is not None), (dev, spec.dev is not None)))
    return files


def input_fingerprints(config: TrainConfig, tasks: dict[str, TaskDef]) -> dict[str, str]:
    """What a run reads, by content, for its record: each task's definition as loaded, and
    each train and dev source by the name the config gives it (a file's sha256; a
    dataset's fingerprint from ``datasets``). A launch compares them with the files as they
    are now, so that a finished run is not reused after its data changed."""
    found = {}
    for name, task in tasks.items():
        found[f"task definition {name}"] = definition_fingerprint(task)
        for source in task_sources(config, name):
            if source is not None:
                found.update([source_fingerprint(source)])
    return found


def source_fingerprint(source: Source) -> tuple[str, str]:
    """``source``'s name and a digest of its content ("missing" for a file not there)."""
    if isinstance(source, DatasetSource):
        opened = open_source(source)
        return opened.name, opened.identity
    path = Path(source)
    if not path.is_file():
        return str(source), "missing"
    return str(source), "sha256:" + _file_digest(*unchanged_stamp(path))


@functools.cache
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """A file's sha256, once per process while its size and time stay (a grid's records
    share their dev files)."""
    return sha256_of(path)


def open_source(source: Source, label_column: str = "label") -> SourceRows:
    """Open any supported source; a missing or unreadable one is an error naming it."""
    if isinstance(source, DatasetSource):
        return _dataset_rows(source, label_column)
    path = Path(source)
    if not path.is_file():
        raise MtdnnError("data file not found", file=path, allowed=SOURCE_HINT)
    if path.suffix.lower() in TABLE_SUFFIXES:
        return SourceRows(_table_rows(path), str(path), sha256_of(path))
    if path.suffix.lower() == ".parquet":
        return _parquet_rows(path, label_column)
    if path.suffix.lower() in (".jsonl", ".json"):
        from mtdnn.files import read_jsonl

        rows = ((Origin(str(path), line=line), row) for line, row in read_jsonl(path))
        return SourceRows(rows, str(path), sha256_of(path))
    raise MtdnnError(f"unknown data file type '{path.suffix}'", file=path, allowed=SOURCE_HINT)


def _table_rows(path: Path) -> Iterator[tuple[Origin, dict[str, Any]]]:
    """CSV (quoted, as spreadsheets write it) or TSV (unquoted, as GLUE writes it) rows,
    read with the ``csv`` module from the file itself (never split on line breaks, so
    U+2028 and friends inside a text stay text)."""
    tsv = path.suffix.lower() == ".tsv"
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, delimiter=TABLE_SUFFIXES[path.suffix.lower()],
                                quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL,
                                strict=not tsv)
            header = [name.strip() for name in next(reader, [])]
            if not header or not any(header):
                raise MtdnnError("the file has no header row", file=path, line=1,
                                 allowed="a first row naming the columns")
            repeated = sorted({n for n in header if header.count(n) > 1})
            if repeated:
                raise MtdnnError(f"the header names column '{repeated[0]}' twice", file=path,
                                 line=1, allowed="distinct column names")
            line = reader.line_num
            for cells in reader:
                start, line = line + 1, reader.line_num
                if not cells or cells == [""]:  # a blank line
                    continue
                if len(cells) != len(header):
                    raise MtdnnError(
                        f"the row has {len(cells)} fields, the header {len(header)}",
                        file=path, line=start,
                        allowed=f"one field per column ({', '.join(header)}); in a TSV, no "
                                "tab inside a text" if tsv else
                                f"one field per column ({', '.join(header)}); quote a field "
                                'that holds a comma, e.g. "a, b"')
                yield Origin(str(path), line=start), dict(zip(header, cells, strict=True))
    except UnicodeDecodeError as error:
        raise MtdnnError(f"not UTF-8 text: byte 0x{error.object[error.start]:02x} at byte "
                         f"offset {error.start}", file=path,
                         allowed="UTF-8 text (save it as 'CSV UTF-8')") from None
    except csv.Error as error:
        raise MtdnnError(f"cannot read it as CSV: {error}", file=path, line=reader.line_num,
                         allowed='fields quoted as "a ""quoted"" word", every quote '
                                 "closed") from None


def _parquet_rows(path: Path, label_column: str) -> SourceRows:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise MtdnnError(f"cannot read this Parquet file: {str(error).splitlines()[0]}",
                         file=path, allowed="a complete Parquet file (e.g. written by "
                                            "pandas.DataFrame.to_parquet)") from None
    rows = ((Origin(str(path), row=number), row)
            for number, row in enumerate(table.to_pylist(), start=1))
    return SourceRows(rows, str(path), sha256_of(path),
                      _parquet_label_names(table.schema.metadata or {}, label_column),
                      table.column_names)


def _parquet_label_names(metadata: dict[bytes, bytes], label_column: str) -> list[str] | None:
    """The ``ClassLabel`` names a Parquet file written by ``datasets`` keeps in its schema."""
    try:
        features = json.loads(metadata[b"huggingface"])["info"]["features"]
        names = features[label_column]["names"]
    except (KeyError, TypeError, ValueError):
        return None
    return [str(name) for name in names] if isinstance(names, list) else None


def _dataset_rows(source: DatasetSource, label_column: str) -> SourceRows:
    import datasets

    where = f"dataset {source.dataset}" + (f"/{source.config}" if source.config else "") + \
        f" split {source.split}"
    if Path(source.dataset).is_dir():
        _check_same_columns(Path(source.dataset), source.split)
    try:
        dataset = datasets.load_dataset(source.dataset, source.config, split=source.split,
                                        cache_dir=datasets_cache())
    except Exception as error:  # noqa: BLE001 - datasets raises many types for a bad source
        if isinstance(error, KeyboardInterrupt):
            raise
        # A missing folder, a hub name without network, files with different columns (a
        # DatasetGenerationError), a truncated file: one paragraph, not a traceback.
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        cause = error.__cause__ or error.__context__
        if cause is not None and str(cause):
            message += f" ({str(cause).splitlines()[0]})"
        raise MtdnnError(f"cannot load {where}: {message}", file=source.dataset, key="dataset",
                         allowed="a Hugging Face dataset name (needs network unless cached), "
                                 "or a local folder of data files with the same columns, "
                                 "with an existing config and split") from None
    label = dataset.features.get(label_column)
    names = getattr(label, "names", None)
    rows = ((Origin(where, index=index), row) for index, row in enumerate(dataset))
    return SourceRows(rows, where, dataset._fingerprint, names, list(dataset.column_names))


def datasets_cache() -> str:
    """Where ``datasets`` keeps what it loads: its own ``HF_DATASETS_CACHE`` if set, else,
    where ``MTDNN_CACHE`` is set, ``$MTDNN_CACHE/datasets`` (one cache folder for
    everything mtdnn writes), else ``datasets``' default. Always a path, so that an
    offline miss says where it looked."""
    import os

    if os.environ.get("HF_DATASETS_CACHE") or not os.environ.get("MTDNN_CACHE"):
        import datasets

        return str(datasets.config.HF_DATASETS_CACHE)
    return str(Path(os.environ["MTDNN_CACHE"]) / "datasets")


def _columns_of(path: Path) -> list[str] | None:
    """The column names of a data file in a dataset folder (None: not a table we read)."""
    try:
        if path.suffix.lower() in TABLE_SUFFIXES:
            with open(path, encoding="utf-8-sig", newline="") as handle:
                return [c.strip() for c in next(csv.reader(
                    handle, delimiter=TABLE_SUFFIXES[path.suffix.lower()]), [])]
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 - an unreadable file is load_dataset's to report
        return None
    return None


def _check_same_columns(folder: Path, split: str) -> None:
    """The data files of one split of a local dataset folder share their columns
    (``datasets`` would stop with a schema error that names neither file). A split's files
    are those whose name holds the split's name, as ``datasets`` groups them."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and _columns_of(p) is not None)
    mine = [p for p in files if split.split("[")[0] in p.name] or files
    seen: tuple[Path, list[str]] | None = None
    for path in mine:
        columns = _columns_of(path)
        if columns is None:
            continue
        if seen is not None and columns != seen[1]:
            raise MtdnnError(f"its columns {columns} differ from those of {seen[0]} "
                             f"({seen[1]})", file=path, key="dataset",
                             allowed="data files with the same columns in one dataset folder")
        seen = seen or (path, columns)


def canonical_rows(opened: SourceRows, task: TaskDef, columns: dict[str, str],
                   require_labels: bool = False) -> Iterator[dict[str, Any]]:
    """The source's rows as canonical examples of ``task``, each validated (errors name
    the user's file and row)."""
    unknown = [f for f in columns if f not in ("uid", "label", *task.inputs)]
    if unknown:
        raise MtdnnError(f"task '{task.name}' has no field '{unknown[0]}'",
                         key=f"columns.{unknown[0]}",
                         allowed=", ".join(("uid", *task.inputs, "label")))
    if opened.label_names is not None and task.task_type.labels.has_names:
        _check_names(opened.label_names, task, opened.name, columns.get("label", "label"))
    count = 0
    for origin, row in opened.rows:
        _check_columns(row, task, columns, origin)
        example = {"uid": str(row.get(columns.get("uid", "uid")) or origin.default_uid())}
        for field in task.inputs:
            example[field] = row[columns.get(field, field)]
        label = _label(row.get(columns.get("label", "label")), task, opened.label_names,
                       origin)
        if label is not None:
            example["label"] = label
        validate_row(task, example, origin, require_labels)
        count += 1
        yield example
    if not count:
        raise MtdnnError(f"task '{task.name}': the source has no examples", file=opened.name,
                         allowed="at least one example")


def _check_names(names: list[str], task: TaskDef, where: str, column: str) -> None:
    if sorted(names) != sorted(task.labels):
        raise MtdnnError(f"its label names {list(names)} are not task '{task.name}''s labels "
                         f"{list(task.labels)}", file=where, key=column,
                         allowed="a task whose labels are the same names (in any order), or "
                                 "a ClassLabel with the task's names")


def _check_columns(row: dict[str, Any], task: TaskDef, columns: dict[str, str],
                   origin: Origin) -> None:
    for field in (*task.inputs, *(["label"] if "label" in columns else [])):
        column = columns.get(field, field)
        if column not in row:
            raise origin.error(f"no column '{column}' for task '{task.name}' field '{field}'",
                               key=f"columns.{field}",
                               allowed=f"its columns: {', '.join(map(str, row))}")


def _label(value: Any, task: TaskDef, names: list[str] | None, origin: Origin) -> Any:
    """A source's label as canonical JSONL holds it: a label name (or an integer position
    where the source has no names) for classification, a number for regression; ``None``
    for no label (an empty cell, a null, NaN, or a ``ClassLabel``'s -1)."""
    if value is None or (isinstance(value, str) and not value.strip()) or \
            (isinstance(value, float) and math.isnan(value)):
        return None
    classification = task.task_type.labels.has_names
    if isinstance(value, str):
        text = value.strip()
        if classification and text in task.labels:
            return text
        try:
            value = float(text)
        except ValueError:
            return text  # neither a name nor a number: validate_row names what is allowed
    if not classification or isinstance(value, bool):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise origin.error(f"label {value!r} is not a whole number", key="label",
                               allowed=f"{', '.join(task.labels)}, or their positions "
                                       f"0-{len(task.labels) - 1} (1.0 counts as 1)")
        value = int(value)
    if names is not None and isinstance(value, int):
        if value == -1:  # a ClassLabel's "no label" (e.g. a test split)
            return None
        if 0 <= value < len(names):
            return names[value]
    return value
