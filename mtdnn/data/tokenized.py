"""Canonical JSONL → tokenized, cached HF ``datasets``; dynamic-padding collation.

Each (file, tokenizer, max_seq_len, task) is tokenized once with the fast tokenizer and
saved with ``Dataset.save_to_disk`` under a key made of the file's sha256 and the
tokenizer's identity, so a second run loads it instead of tokenizing again. Examples
longer than ``max_seq_len`` are truncated (longest text first) and counted.

Reading and checking a file's rows (:func:`read_examples`) needs neither torch nor
``datasets``, which are imported where a split is built: a command checks its input before
it loads the weights that will score it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from mtdnn.data.sources import TaskFiles, shown_name
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_dir, read_jsonl, sha256_of
from mtdnn.tasks.rows import Origin, validate_row
from mtdnn.tasks.task_def import TaskDef
from mtdnn.tasks.task_type import RowError, TaskType, pad_tokens

if TYPE_CHECKING:
    import datasets
    import torch

    from mtdnn.config.train_config import TrainConfig

log = logging.getLogger(__name__)
CACHE_FORMAT = 3  # bump when the cached columns change


@dataclass
class TaskSplit:
    """One tokenized split of one task, ready for batching."""

    task: TaskDef
    path: Path
    dataset: datasets.Dataset  # input_ids[, token_type_ids][, labels], uid (no padding)
    num_truncated: int
    from_cache: bool

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def has_labels(self) -> bool:
        return "labels" in self.dataset.column_names


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


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of everything that decides how the tokenizer splits text.

    The backend's truncation and padding settings are left out: they change whenever the
    tokenizer is called, not what it produces for a given ``max_length``. Remembered per
    tokenizer object (hashing its whole vocabulary takes ~0.1 s) until its size changes.
    """
    size = len(tokenizer)
    known = _FINGERPRINTS.get(tokenizer)
    if known is not None and known[0] == size:
        return known[1]
    fingerprint = _fingerprint(tokenizer)
    _FINGERPRINTS[tokenizer] = (size, fingerprint)
    return fingerprint


def _fingerprint(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        spec.pop("truncation", None)
        spec.pop("padding", None)
    else:
        spec = tokenizer.get_vocab()
    text = json.dumps(spec, sort_keys=True)
    return hashlib.sha256(f"{type(tokenizer).__name__}\n{text}".encode()).hexdigest()


def _tokenize(columns: dict[str, list], task: TaskDef, tokenizer: Any,
              max_seq_len: int, path: Path | None = None) -> tuple[dict[str, list], int]:
    try:
        return task.task_type.featurize(task, columns, tokenizer, max_seq_len)
    except MtdnnError as error:  # e.g. windows that cannot fit: name the file they cut
        if error.file is None and path is not None:
            error.file = str(path)
        raise


def _to_dataset(columns: dict[str, list], task: TaskDef) -> datasets.Dataset:
    import datasets

    types = task.task_type.arrow_types()
    return datasets.Dataset(pa.table({key: pa.array(values, type=types.get(key))
                                      for key, values in columns.items()}))


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    import datasets

    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if enabled:
            datasets.enable_progress_bars()


def tokenize_examples(columns: dict[str, list], task: TaskDef, tokenizer: Any,
                      max_seq_len: int, path: Path = Path("<memory>")) -> TaskSplit:
    """Tokenize examples given as columns (``uid``, the task's inputs[, ``labels``])."""
    tokenized, num_truncated = _tokenize(columns, task, tokenizer, max_seq_len, path)
    return TaskSplit(task, path, _to_dataset(tokenized, task), num_truncated, False)


def check_exists(path: Path, task: TaskDef) -> None:
    if not path.is_file():
        raise MtdnnError(f"task '{task.name}': data file not found", file=path,
                         allowed="run `python -m mtdnn.data_prep` or set tasks.<task>.train/dev")


def load_split(path: Path, task: TaskDef, tokenizer: Any, max_seq_len: int,
               cache_dir: Path, require_labels: bool = True) -> TaskSplit:
    """Tokenize ``path`` for ``task`` (or load it from the cache)."""
    import datasets

    check_exists(path, task)
    key = hashlib.sha256(json.dumps([
        CACHE_FORMAT, sha256_of(path), tokenizer_fingerprint(tokenizer), max_seq_len,
        task.type, task.inputs, task.labels, require_labels,
        *([task.options] if task.options else [])]).encode()).hexdigest()[:20]
    cached = cache_dir / f"{task.name}-{path.stem}-{key}"
    if (cached / "mtdnn_meta.json").is_file():
        meta = json.loads((cached / "mtdnn_meta.json").read_text())
        dataset = datasets.load_from_disk(str(cached))
        return TaskSplit(task, path, dataset, meta["num_truncated"], from_cache=True)
    columns, num_truncated = _tokenize(read_examples(path, task, require_labels), task,
                                       tokenizer, max_seq_len, path)
    dataset = _to_dataset(columns, task)
    with atomic_dir(cached) as tmp, _no_progress_bars():
        dataset.save_to_disk(str(tmp))
        (tmp / "mtdnn_meta.json").write_text(json.dumps(
            {"source": str(path), "rows": len(dataset), "num_truncated": num_truncated}))
    dataset = datasets.load_from_disk(str(cached))
    return TaskSplit(task, path, dataset, num_truncated, from_cache=False)


class Collator:
    """Pad a list of tokenized examples of one task as its type pads them (labels too, -100
    where a label is absent); without a type, only the token ids and the attention mask."""

    def __init__(self, pad_token_id: int, task_type: TaskType | None = None) -> None:
        self.pad_token_id = pad_token_id
        self.task_type = task_type

    def __call__(self, rows: dict[str, list]) -> dict[str, torch.Tensor]:
        if self.task_type is None:
            return pad_tokens(rows, self.pad_token_id)
        return self.task_type.collate(rows, self.pad_token_id)

    def of(self, task: TaskDef) -> Collator:
        """This padding, for ``task``'s type."""
        return Collator(self.pad_token_id, task.task_type)


def get_batch(split: TaskSplit, indices: np.ndarray, collator: Collator) -> dict[str, torch.Tensor]:
    """The padded batch of ``split`` at ``indices``."""
    return collator(split.dataset[indices.tolist()])


@dataclass
class TaskSplits:
    """A task's tokenized splits and its collator."""

    train: TaskSplit
    dev: TaskSplit | None
    collator: Collator


def load_task_data(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer: Any,
                   files: dict[str, TaskFiles]) -> dict[str, TaskSplits]:
    """Tokenize (or load from cache) every task's canonical train and dev files
    (``sources.canonical_files``). Under torchrun, call it under
    ``Distributed.main_first()``: rank 0 fills the cache and the other ranks read it."""
    cache = config.cache_folder
    log.info("data cache: %s", cache)
    data = {}
    for name, task in tasks.items():
        task.task_type.check_installed(task)
        collator = Collator(tokenizer.pad_token_id, task.task_type)
        train, dev = [path and load_split(path, task, tokenizer, config.max_seq_len, cache)
                      for path in files[name]]
        for split in (train, dev):
            if split is not None:
                log.info("%s: %s, %s%s", name, shown_name(split.path),
                         task.task_type.describe_split(len(split), split.num_truncated,
                                                       config.max_seq_len),
                         " (cached)" if split.from_cache else "")
        limit = config.max_eval_examples
        if dev is not None and limit is not None and len(dev) > limit:
            log.info("%s: scoring the first %d of its %d dev examples (max_eval_examples)",
                     name, limit, len(dev))
            dev = replace(dev, dataset=dev.dataset.select(range(limit)))
        data[name] = TaskSplits(train, dev, collator)
    return data
