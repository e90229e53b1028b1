"""Batched inference: head outputs → probabilities / scores, and dev metrics.

Examples are run in order of length so each batch pads little, then put back in file
order. Runs under ``torch.inference_mode()``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from mtdnn.checkpoint import load_checkpoint_tasks
from mtdnn.data import Collator, TaskSplit, get_batch, tokenize_file
from mtdnn.errors import Interrupted, MtdnnError
from mtdnn.files import atomic_write_text, check_output
from mtdnn.metrics import compute_metrics
from mtdnn.model import MultiTaskModel
from mtdnn.precision import autocast_context
from mtdnn.task_def import TaskDef


@torch.inference_mode()
def predict_heads(model: MultiTaskModel, split: TaskSplit, collator: Collator,
                  batch_size: int, device: torch.device, amp_dtype: torch.dtype | None = None,
                  on_batch: Callable[[int], None] | None = None,
                  tasks: list[TaskDef] | None = None) -> dict[str, np.ndarray]:
    """Each of ``tasks``' (default: the split's task) class probabilities ``[n, labels]`` or
    scores ``[n]`` for every example of ``split``; the encoder runs once per batch and
    every head reads its pooled output."""
    was_training = model.training
    model.eval()
    tasks = tasks or [split.task]
    lengths = np.array([len(ids) for ids in split.dataset["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    outputs: dict[str, list[np.ndarray]] = {task.name: [] for task in tasks}
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = get_batch(split, indices, collator)
        batch.pop("labels", None)
        with autocast_context(device, amp_dtype):
            pooled = model.pool(**{k: v.to(device) for k, v in batch.items()})
            for task in tasks:
                head = model.heads[task.name](pooled)
                outputs[task.name].append(task.task_type.predict(head).float().cpu().numpy())
        if on_batch is not None:
            on_batch(len(indices))
    predictions = {}
    for name, parts in outputs.items():
        predictions[name] = np.empty_like(np.concatenate(parts))
        predictions[name][order] = np.concatenate(parts)
    model.train(was_training)
    return predictions


def predict_split(model: MultiTaskModel, split: TaskSplit, collator: Collator, batch_size: int,
                  device: torch.device, amp_dtype: torch.dtype | None = None,
                  on_batch: Callable[[int], None] | None = None) -> np.ndarray:
    """Class probabilities ``[n, labels]`` or scores ``[n]`` for every example of ``split``."""
    return predict_heads(model, split, collator, batch_size, device, amp_dtype,
                         on_batch)[split.task.name]


def evaluate_split(model: MultiTaskModel, split: TaskSplit, collator: Collator,
                   batch_size: int, device: torch.device,
                   amp_dtype: torch.dtype | None = None) -> dict[str, float]:
    """The task's metrics on a labelled split."""
    predicted = predict_split(model, split, collator, batch_size, device, amp_dtype)
    return split_metrics(split, predicted)


def split_metrics(split: TaskSplit, predicted: np.ndarray) -> dict[str, float]:
    """The task's metrics of ``predicted`` (from :func:`predict_split`) on a labelled split."""
    decided = split.task.task_type.decide(predicted)
    labels = np.asarray(split.dataset["labels"])
    return compute_metrics(split.task.metrics, decided, labels)


def mean_entropy(predicted: np.ndarray) -> float | None:
    """Mean entropy (nats) of predicted class distributions ``[n, labels]``; ``None`` for
    scores. ln(labels) is a uniform guess: near it, the model barely commits."""
    if predicted.ndim != 2 or len(predicted) == 0:
        return None
    probs = np.clip(predicted.astype(np.float64), 1e-12, 1.0)
    return float(-(probs * np.log(probs)).sum(axis=1).mean())


def ensemble(predictions: list[np.ndarray]) -> np.ndarray:
    """Mean of class probabilities (classification) or of scores (regression)."""
    return np.mean(np.stack(predictions), axis=0)


def prediction_records(task: TaskDef, uids: list[str], predicted: np.ndarray
                       ) -> list[dict[str, Any]]:
    """One output object per example: uid, predicted label (or score), probabilities."""
    decided = task.task_type.decide(predicted)
    return [{"uid": uid, **task.task_type.labels.record(label, probs, task.labels)}
            for uid, label, probs in zip(uids, decided, predicted, strict=True)]


def glue_index(uid: str, path: str, line: int) -> str:
    """The GLUE test index at the end of a uid like ``rte-test-17``."""
    index = uid.rsplit("-", 1)[-1]
    if not index.isdigit():
        raise MtdnnError(f"uid {uid!r} does not end in a GLUE index", file=path, line=line,
                         allowed="uids written by data_prep, e.g. rte-test-17")
    return index


def checkpoint_task(checkpoints: list[Path], task_name: str) -> TaskDef:
    """The task definition shared by every checkpoint; an error names the odd one out."""
    found = None
    for path in checkpoints:
        tasks = load_checkpoint_tasks(path)
        if task_name not in tasks:
            raise MtdnnError(f"task '{task_name}' is not in this checkpoint", file=path,
                             key="--task", allowed=", ".join(tasks))
        task = tasks[task_name]
        if found is not None and (task.type, task.labels) != (found.type, found.labels):
            raise MtdnnError(f"task '{task_name}' has labels {list(task.labels)} here but "
                             f"{list(found.labels)} in {checkpoints[0]}", file=path,
                             key="--checkpoint", allowed="checkpoints of the same task")
        found = found or task
    return found


FORMATS = ("jsonl", "csv", "glue")


def output_format(path: Path, fmt: str | None) -> str:
    """``fmt``, else what the output's name says: ``.csv`` is CSV, anything else JSONL."""
    if fmt is None:
        return "csv" if path.suffix == ".csv" else "jsonl"
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
            else:
                row[f"{prefix}{key}"] = value
        return row

    return [flat(record) for record in records]


def write_predictions(path: Path, records: list[dict[str, Any]], fmt: str,
                      source: Path) -> None:
    """JSON lines, CSV (:func:`csv_rows`), or a GLUE submission TSV
    (``index<TAB>prediction``), written atomically."""
    if fmt == "glue":
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


def predict_file(checkpoints: list[Any], task_names: str | list[str], source: Any,
                 output_path: Path, batch_size: int | None = None, fmt: str | None = None,
                 progress: bool = True, overwrite: bool = False,
                 precision: str = "auto", columns: dict[str, str] | None = None,
                 cache_dir: Path | None = None) -> dict[str, Any]:
    """Score ``source`` with one checkpoint or an ensemble (folders, or loaded
    :class:`~mtdnn.predictor.Predictor` objects), with one task's head or
    several (the encoder runs once for all of them); write predictions (and, for labelled
    input scored by one task, metrics next to them). ``source`` is what training reads:
    canonical JSONL, a CSV, TSV or Parquet file, or a Hugging Face dataset split
    (:class:`mtdnn.sources.DatasetSource`), with ``columns`` mapping the task's fields to
    its columns. The output is JSONL, CSV or a GLUE TSV (``fmt``, else by its suffix).
    Nothing is written if anything fails, and no input or existing file is overwritten
    unless ``overwrite``."""
    from mtdnn.config import default_cache_dir
    from mtdnn.sources import DatasetSource, canonical_path

    names = [task_names] if isinstance(task_names, str) else list(task_names)
    fmt = output_format(output_path, fmt)
    if batch_size is not None and batch_size <= 0:
        raise MtdnnError(f"batch size {batch_size} is not positive", key="--batch-size",
                         allowed="a whole number >= 1 (default: the run's eval_batch_size)")
    if len(names) > 1 and fmt == "glue":
        raise MtdnnError(f"a GLUE submission file holds one task, {len(names)} were given",
                         key="--format", allowed="--format jsonl or csv with several --task")
    inputs = [] if isinstance(source, DatasetSource) else [Path(source)]
    folders = [getattr(c, "checkpoint", c) for c in checkpoints]
    for path in (output_path, metrics_path(output_path)):
        check_output(path, [*inputs, *folders], key="--output", overwrite=overwrite)
    tasks = [checkpoint_task(folders, name) for name in names]
    input_path = canonical_path(source if isinstance(source, DatasetSource) else str(source),
                                tasks[0], columns or {}, cache_dir or default_cache_dir())
    try:
        return _predict_file(checkpoints, names, input_path, output_path, batch_size, fmt,
                             progress, precision)
    except KeyboardInterrupt:
        raise Interrupted("interrupted; no predictions were written", file=output_path
                          ) from None


def task_groups(tasks: list[TaskDef], by_name: bool = True
                ) -> dict[tuple[str, ...], list[TaskDef]]:
    """The tasks grouped by the texts they read, in order of first appearance: each group
    shares one encoding of the input, and so one encoder pass per batch. Records (and
    files) name their fields, so tasks reading the same field names share; positional
    examples (a text, a pair) are read by position, so tasks reading as many texts share.
    Each group is keyed by its first task's fields."""
    groups: dict[Any, list[TaskDef]] = {}
    for task in tasks:
        groups.setdefault(tuple(task.inputs) if by_name else len(task.inputs), []).append(task)
    return {tuple(group[0].inputs): group for group in groups.values()}


def shared_inputs(tasks: list[TaskDef]) -> None:
    """Several heads read one encoding of the input only if their tasks read the same
    fields."""
    odd = [t for t in tasks if t.inputs != tasks[0].inputs]
    if odd:
        raise MtdnnError(f"task '{odd[0].name}' reads {list(odd[0].inputs)}, task "
                         f"'{tasks[0].name}' reads {list(tasks[0].inputs)}", key="--task",
                         allowed="tasks with the same input fields in one call")


def _predict_file(checkpoints: list[Any], names: list[str], input_path: Path,
                  output_path: Path, batch_size: int | None, fmt: str, progress: bool,
                  precision: str) -> dict[str, Any]:
    """Each checkpoint (a folder, or a loaded :class:`~mtdnn.predictor.Predictor`) scores
    the file: one way to load a model, resolve its precision and batch its examples."""
    from mtdnn.predictor import Predictor

    tasks = [checkpoint_task([getattr(c, "checkpoint", c) for c in checkpoints], name)
             for name in names]
    shared_inputs(tasks)
    outputs: dict[str, list[np.ndarray]] = {name: [] for name in names}
    split = None
    started = time.perf_counter()
    for checkpoint in checkpoints:
        predictor = checkpoint if isinstance(checkpoint, Predictor) else \
            Predictor(checkpoint, precision=precision, batch_size=batch_size)
        split = tokenize_file(input_path, tasks[0], predictor.tokenizer, predictor.max_seq_len)
        with tqdm(total=len(split), disable=not progress,
                  desc=f"predict {predictor.checkpoint.name}", unit="ex") as bar:
            predicted = predict_heads(predictor.model, split, predictor.collator,
                                      batch_size or predictor.batch_size, predictor.device,
                                      predictor.amp_dtype, on_batch=bar.update, tasks=tasks)
        for name in names:
            outputs[name].append(predicted[name])
    resolved = predictor.precision
    seconds = time.perf_counter() - started
    predicted = {name: ensemble(found) for name, found in outputs.items()}
    metrics = None
    if split.has_labels and len(tasks) == 1:
        decided = tasks[0].task_type.decide(predicted[names[0]])
        metrics = compute_metrics(tasks[0].metrics, decided,
                                  np.asarray(split.dataset["labels"]))
    per_task = {t.name: prediction_records(t, split.dataset["uid"], predicted[t.name])
                for t in tasks}
    if len(tasks) == 1:
        records = per_task[names[0]]
    else:  # one object per example: its uid, then each task's prediction
        records = [{"uid": uid, **{name: {k: v for k, v in per_task[name][i].items()
                                          if k != "uid"} for name in names}}
                   for i, uid in enumerate(split.dataset["uid"])]
    write_predictions(output_path, records, fmt, input_path)
    if metrics is not None:
        atomic_write_text(metrics_path(output_path),
                          json.dumps({"task": names[0], "metrics": metrics}, indent=2) + "\n")
    return {"examples": len(split), "seconds": seconds, "metrics": metrics,
            "examples_per_s": len(split) * len(checkpoints) / seconds, "precision": resolved}


def metrics_path(output_path: Path) -> Path:
    """Where the metrics of a labelled prediction go: beside the output."""
    return output_path.with_name(output_path.name + ".metrics.json")
