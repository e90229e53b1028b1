"""Canonical JSONL → tokenized, cached HF ``datasets``; dynamic-padding collation.

Each (file, tokenizer, max_seq_len, task) is tokenized once with the fast tokenizer and
saved with ``Dataset.save_to_disk`` under a key made of the file's sha256 and the
tokenizer's identity, so a second run loads it instead of tokenizing again. Examples
longer than ``max_seq_len`` are truncated (longest text first) and counted.
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

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import torch

from mtdnn.data.sources import TaskFiles, shown_name
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_dir, read_jsonl, sha256_of
from mtdnn.tasks.rows import Origin, validate_row
from mtdnn.tasks.task_def import TaskDef

if TYPE_CHECKING:
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
    if len(table) == 0 or any(name not in table.column_names for name in ("uid", *task.inputs)):
        return None
    columns: dict[str, list] = {}
    for name in ("uid", *task.inputs):
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
    """Columns of a canonical JSONL file, validated against the task; errors name the line."""
    fast = _read_columns_fast(path, task, require_labels)
    if fast is not None:
        return fast
    columns: dict[str, list] = {"uid": [], **{name: [] for name in task.inputs}, "labels": []}
    for line, obj in read_jsonl(path):
        label = validate_row(task, obj, Origin(str(path), line=line), require_labels)
        for name in task.inputs:
            columns[name].append(obj[name])
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
    return columns


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


TOKENIZE_CHUNK = 1000  # examples per tokenizer call


def _tokenize(columns: dict[str, list], task: TaskDef, tokenizer: Any,
              max_seq_len: int) -> tuple[dict[str, list], int]:
    out: dict[str, list] = {"input_ids": [], "token_type_ids": []}
    truncated = 0
    for start in range(0, len(columns["uid"]), TOKENIZE_CHUNK):
        texts = [columns[name][start:start + TOKENIZE_CHUNK] for name in task.inputs]
        # No attention mask: stored rows have no padding, so the collator derives it.
        encoded = tokenizer(*texts, truncation=True, max_length=max_seq_len,
                            return_attention_mask=False)
        # Only an example that fills max_seq_len can have been cut: re-encode those few in
        # full to count them (cheaper than asking every example for its overflow).
        full = [i for i, ids in enumerate(encoded["input_ids"]) if len(ids) == max_seq_len]
        if full:
            whole = tokenizer(*[[t[i] for i in full] for t in texts],
                              return_attention_mask=False, return_token_type_ids=False)
            truncated += sum(len(ids) > max_seq_len for ids in whole["input_ids"])
        for key in out:
            if key in encoded:
                out[key].extend(encoded[key])
    out = {key: values for key, values in out.items() if values}
    out["uid"] = columns["uid"]
    if "labels" in columns:
        out["labels"] = columns["labels"]
    return out, truncated


def _to_dataset(columns: dict[str, list]) -> datasets.Dataset:
    """Token ids as int32 and segment ids as int8: a smaller cache, built faster than from
    Python's int64 guesses."""
    types = {"input_ids": pa.list_(pa.int32()), "token_type_ids": pa.list_(pa.int8())}
    return datasets.Dataset(pa.table({key: pa.array(values, type=types.get(key))
                                      for key, values in columns.items()}))


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if enabled:
            datasets.enable_progress_bars()


def tokenize_file(path: Path, task: TaskDef, tokenizer: Any, max_seq_len: int,
                  require_labels: bool = False) -> TaskSplit:
    """Tokenize ``path`` in memory, without the cache (for one-off prediction)."""
    _check_exists(path, task)
    return tokenize_examples(read_examples(path, task, require_labels), task, tokenizer,
                             max_seq_len, path)


def tokenize_examples(columns: dict[str, list], task: TaskDef, tokenizer: Any,
                      max_seq_len: int, path: Path = Path("<memory>")) -> TaskSplit:
    """Tokenize examples given as columns (``uid``, the task's inputs[, ``labels``])."""
    tokenized, num_truncated = _tokenize(columns, task, tokenizer, max_seq_len)
    return TaskSplit(task, path, _to_dataset(tokenized), num_truncated, False)


def _check_exists(path: Path, task: TaskDef) -> None:
    if not path.is_file():
        raise MtdnnError(f"task '{task.name}': data file not found", file=path,
                         allowed="run `python -m mtdnn.data_prep` or set tasks.<task>.train/dev")


def load_split(path: Path, task: TaskDef, tokenizer: Any, max_seq_len: int,
               cache_dir: Path, require_labels: bool = True) -> TaskSplit:
    """Tokenize ``path`` for ``task`` (or load it from the cache)."""
    _check_exists(path, task)
    key = hashlib.sha256(json.dumps([
        CACHE_FORMAT, sha256_of(path), tokenizer_fingerprint(tokenizer), max_seq_len,
        task.type, task.inputs, task.labels, require_labels]).encode()).hexdigest()[:20]
    cached = cache_dir / f"{task.name}-{path.stem}-{key}"
    if (cached / "mtdnn_meta.json").is_file():
        meta = json.loads((cached / "mtdnn_meta.json").read_text())
        dataset = datasets.load_from_disk(str(cached))
        return TaskSplit(task, path, dataset, meta["num_truncated"], from_cache=True)
    columns, num_truncated = _tokenize(read_examples(path, task, require_labels), task,
                                       tokenizer, max_seq_len)
    dataset = _to_dataset(columns)
    with atomic_dir(cached) as tmp, _no_progress_bars():
        dataset.save_to_disk(str(tmp))
        (tmp / "mtdnn_meta.json").write_text(json.dumps(
            {"source": str(path), "rows": len(dataset), "num_truncated": num_truncated}))
    dataset = datasets.load_from_disk(str(cached))
    if num_truncated:
        log.info("%s: %d of %d examples truncated to %d tokens", shown_name(path), num_truncated,
                 len(dataset), max_seq_len)
    return TaskSplit(task, path, dataset, num_truncated, from_cache=False)


class Collator:
    """Pad a list of tokenized examples to the longest one in the batch."""

    def __init__(self, pad_token_id: int, target_dtype: torch.dtype | None = None) -> None:
        self.pad_token_id = pad_token_id
        self.target_dtype = target_dtype

    def __call__(self, rows: dict[str, list]) -> dict[str, torch.Tensor]:
        ids = rows["input_ids"]
        lengths = torch.tensor([len(x) for x in ids])
        width = int(lengths.max())
        batch = {"attention_mask": (torch.arange(width) < lengths[:, None]).long()}
        for key, pad in (("input_ids", self.pad_token_id), ("token_type_ids", 0)):
            if key in rows:
                batch[key] = torch.tensor([x + [pad] * (width - len(x)) for x in rows[key]],
                                          dtype=torch.long)
        if "labels" in rows and self.target_dtype is not None:
            batch["labels"] = torch.tensor(rows["labels"], dtype=self.target_dtype)
        return batch


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
        collator = Collator(tokenizer.pad_token_id, getattr(torch, task.task_type.target_dtype))
        train, dev = [path and load_split(path, task, tokenizer, config.max_seq_len, cache)
                      for path in files[name]]
        for split in (train, dev):
            if split is not None:
                log.info("%s: %s, %d examples, %d truncated%s", name, shown_name(split.path),
                         len(split),
                         split.num_truncated, " (cached)" if split.from_cache else "")
        limit = config.max_eval_examples
        if dev is not None and limit is not None and len(dev) > limit:
            log.info("%s: scoring the first %d of its %d dev examples (max_eval_examples)",
                     name, limit, len(dev))
            dev = replace(dev, dataset=dev.dataset.select(range(limit)))
        data[name] = TaskSplits(train, dev, collator)
    return data
