"""Prediction from Python: load a checkpoint once, score examples in memory with any of its
heads.

    from mtdnn import Predictor

    predictor = Predictor("runs/mtdnn_glue/best")
    predictor.predict([("A man plays.", "Someone plays.")], tasks=["rte", "mnli"])
    # [{"rte": {"prediction": "entailment", "probabilities": {...}},
    #   "mnli": {"prediction": "entailment", "probabilities": {...}}}]
    predictor.predict([{"sentence": "Great film.", "sentence1": "A.", "sentence2": "B."}],
                      tasks=["sst2", "rte"])  # heads with different inputs, one call

Heads that read the same fields share one encoder pass per batch (they read the same
pooled output), so asking for several tasks costs little more than asking for one; heads
that read other fields get a pass of their own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mtdnn.errors import Interrupted, MtdnnError
from mtdnn.files import atomic_write_text, check_output
from mtdnn.inference.writers import (
    ensemble,
    metrics_path,
    output_format,
    prediction_records,
    write_predictions,
)
from mtdnn.tasks.task_def import TaskDef
from mtdnn.tasks.task_type import TaskType

Example = str | Sequence[str] | dict[str, str]


EXAMPLES_HINT = ("a list of texts, of pairs of texts (tuples or lists), or of mappings of "
                 "the tasks' fields to texts (records); also a numpy array or a pandas "
                 "Series or DataFrame of them")


class Predictor:
    """A checkpoint's model and tokenizer, loaded once, on CUDA with bf16/fp16 where the
    hardware has them (``precision="auto"``, ``device="auto"``)."""

    def __init__(self, checkpoint: str | Path, precision: str = "auto",
                 batch_size: int | None = None, device: str = "auto") -> None:
        import torch

        from mtdnn.data.tokenized import Collator
        from mtdnn.modeling.precision import AMP_DTYPES, inference_device, native_precision
        from mtdnn.runs.checkpoint import load_checkpoint_tasks, load_model, saved_run_config

        if batch_size is not None and (isinstance(batch_size, bool) or
                                       not isinstance(batch_size, int) or batch_size < 1):
            raise MtdnnError(f"batch_size {batch_size!r} is not a positive whole number",
                             key="batch_size", allowed="a whole number >= 1, or None (the "
                                                       "checkpoint's eval_batch_size)")
        self.checkpoint = Path(checkpoint)
        self.tasks = load_checkpoint_tasks(self.checkpoint)
        saved = saved_run_config(self.checkpoint)
        self.max_seq_len = saved["max_seq_len"]
        self.batch_size = batch_size or saved["eval_batch_size"]
        if device == "auto":
            self.device, native = inference_device()
        else:
            try:
                self.device = torch.device(device)
            except (RuntimeError, TypeError):
                raise MtdnnError(f"unknown device {device!r}", key="device",
                                 allowed="auto, cpu, cuda, cuda:N") from None
            if self.device.type == "cuda" and not torch.cuda.is_available():
                raise MtdnnError("device 'cuda' asked for, but CUDA is not available",
                                 key="device", allowed="auto or cpu")
            native = native_precision(self.device)
        self.precision = native if precision == "auto" else precision
        if self.precision not in AMP_DTYPES:
            raise MtdnnError(f"unknown precision {precision!r}", key="precision",
                             allowed="auto, " + ", ".join(AMP_DTYPES))
        self.amp_dtype = AMP_DTYPES[self.precision]
        self.model, self.tokenizer = load_model(self.checkpoint)
        self.model.to(self.device)
        self.collator = Collator(self.tokenizer.pad_token_id)

    def predict(self, examples: Sequence[Example], tasks: Sequence[str] | None = None
                ) -> list[dict[str, dict[str, Any]]]:
        """For each example, every requested task's prediction and its label probabilities
        (or score). An example is a text, a pair of texts (a tuple or list), or a record (a
        mapping of the tasks' input fields to texts); ``tasks`` defaults to all the
        checkpoint's heads that can read the examples."""
        from mtdnn.inference.batched import task_groups

        examples = as_examples(examples)
        if not examples:
            return []
        chosen = self._tasks(tasks, examples[0])
        results: list[dict[str, dict[str, Any]]] = [{} for _ in examples]
        records = isinstance(examples[0], dict)
        for fields, group in task_groups(chosen, by_name=records):
            columns = {"uid": [str(i) for i in range(len(examples))],
                       **{name: [] for name in fields}}
            for number, example in enumerate(examples):
                texts = texts_of(example, fields, number, group[0].task_type)
                for name, text in zip(fields, texts, strict=True):
                    columns[name].append(text)
            for name, values in self.predict_columns(columns, group).items():
                for i, value in enumerate(values):
                    results[i][name] = value
        return results

    def predict_columns(self, columns: dict[str, list], tasks: list) -> dict[str, list]:
        """Each of ``tasks``' output records for examples given as columns (``uid`` and the
        tasks' shared input fields): one encoder pass per batch for all of them."""
        from mtdnn.data.tokenized import tokenize_examples
        from mtdnn.inference.batched import predict_heads

        split = tokenize_examples(columns, tasks[0], self.tokenizer, self.max_seq_len)
        predicted = predict_heads(self.model, split, self.collator, self.batch_size,
                                  self.device, self.amp_dtype, tasks=tasks)
        return {task.name: [{k: v for k, v in record.items() if k != "uid"}
                            for record in prediction_records(task, split.dataset,
                                                             predicted[task.name])]
                for task in tasks}

    def predict_file(self, source: Any, output: str | Path, tasks: Sequence[str] | str,
                     columns: dict[str, str] | None = None, fmt: str | None = None,
                     overwrite: bool = False, progress: bool = False) -> dict[str, Any]:
        """Score a data source as training reads it (canonical JSONL, a CSV, TSV or Parquet
        file, or a :class:`~mtdnn.config.train_config.DatasetSource`, with ``columns`` mapping the
        tasks' fields to its columns) and write the predictions to ``output``: JSONL, CSV
        (``.csv``, or ``fmt``) or a GLUE TSV. Returns the count, speed and, for labelled
        input and one task, the metrics (also written beside the output)."""
        return predict_file([self], tasks, source, Path(output), self.batch_size, fmt,
                            progress=progress, overwrite=overwrite, precision=self.precision,
                            columns=columns)

    def _tasks(self, names: Sequence[str] | None, first: Example) -> list:
        if names is None:
            found = [t for t in self.tasks.values() if readable(first, t.inputs)]
            if not found:
                raise MtdnnError("no task of this checkpoint reads examples like the first "
                                 f"({describe(first)})", file=self.checkpoint, key="tasks",
                                 allowed=", ".join(f"{t.name} ({', '.join(t.inputs)})"
                                                   for t in self.tasks.values()))
            return found
        if isinstance(names, str):
            names = [names]
        unknown = [n for n in names if n not in self.tasks]
        if unknown:
            raise MtdnnError(f"task '{unknown[0]}' is not in this checkpoint",
                             file=self.checkpoint, key="tasks", allowed=", ".join(self.tasks))
        return [self.tasks[n] for n in names]


def as_examples(examples: Any) -> list:
    """A list of examples from a list, a tuple, a numpy array or a pandas Series or
    DataFrame (its rows as records)."""
    if isinstance(examples, (str, bytes)):
        raise MtdnnError("examples is one string, not a list of examples", key="examples",
                         allowed=f"{EXAMPLES_HINT}, e.g. [\"A text.\"]")
    if isinstance(examples, dict):
        raise MtdnnError("examples is one mapping, not a list of examples", key="examples",
                         allowed=f"{EXAMPLES_HINT}, e.g. [{{...}}]")
    if hasattr(examples, "to_dict") and hasattr(examples, "columns"):  # a DataFrame
        return examples.to_dict("records")
    if hasattr(examples, "tolist"):  # a numpy array or a pandas Series
        examples = examples.tolist()
    if not isinstance(examples, Sequence):
        raise MtdnnError(f"examples is a {type(examples).__name__}", key="examples",
                         allowed=EXAMPLES_HINT)
    return list(examples)


def readable(example: Any, fields: tuple[str, ...]) -> bool:
    """Whether a task reading ``fields`` can read ``example``."""
    if isinstance(example, dict):
        return all(name in example for name in fields)
    if isinstance(example, str):
        return len(fields) == 1
    return isinstance(example, (list, tuple)) and len(example) == len(fields)


def describe(example: Any) -> str:
    if isinstance(example, dict):
        return "a record of " + ", ".join(map(str, example))
    if isinstance(example, (list, tuple)):
        return f"{len(example)} texts"
    return "one text" if isinstance(example, str) else type(example).__name__


def texts_of(example: Any, fields: tuple[str, ...], number: int,
             kind: TaskType | None = None) -> tuple[Any, ...]:
    """The texts of ``example`` for a task reading ``fields``; an error names the example."""
    if isinstance(example, dict):
        missing = [f for f in fields if f not in example]
        if missing:
            raise MtdnnError(f"example {number} has no field '{missing[0]}'", key="examples",
                             allowed=f"records with {', '.join(fields)}")
        texts = tuple(example[f] for f in fields)
    elif isinstance(example, str):
        texts = (example,)
    elif isinstance(example, (list, tuple)):
        texts = tuple(example)
    else:
        raise MtdnnError(f"example {number} is {example!r} ({type(example).__name__})",
                         key="examples", allowed=EXAMPLES_HINT)
    if len(texts) != len(fields):
        raise MtdnnError(f"example {number} has {len(texts)} text(s), a task reads "
                         f"{len(fields)} ({', '.join(fields)})", key="examples",
                         allowed="as many texts as the task reads; for heads with different "
                                 "inputs in one call, records with every field")
    if kind is not None:
        return tuple(kind.user_field(text, f"example {number}: '{name}'")
                     for name, text in zip(fields, texts, strict=True))
    return tuple(TaskType.user_field(None, text, f"example {number}: '{name}'")
                 for name, text in zip(fields, texts, strict=True))


def checkpoint_task(checkpoints: list[Path], task_name: str) -> TaskDef:
    """The task definition shared by every checkpoint; an error names the odd one out."""
    from mtdnn.runs.checkpoint import load_checkpoint_tasks

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


def predict_file(checkpoints: list[Any], task_names: str | list[str], source: Any,
                 output_path: Path, batch_size: int | None = None, fmt: str | None = None,
                 progress: bool = True, overwrite: bool = False,
                 precision: str = "auto", columns: dict[str, str] | None = None,
                 cache_dir: Path | None = None) -> dict[str, Any]:
    """Score ``source`` with one checkpoint or an ensemble (folders, or loaded
    :class:`~mtdnn.inference.predictor.Predictor` objects), with one task's head or
    several (the encoder runs once for all of them); write predictions (and, for labelled
    input scored by one task, metrics next to them). ``source`` is what training reads:
    canonical JSONL, a CSV, TSV or Parquet file, or a Hugging Face dataset split
    (:class:`mtdnn.config.train_config.DatasetSource`), with ``columns`` mapping the task's
    fields to
    its columns. The output is JSONL, CSV or a GLUE TSV (``fmt``, else by its suffix).
    Nothing is written if anything fails, and no input or existing file is overwritten
    unless ``overwrite``."""
    from mtdnn.config.train_config import DatasetSource, default_cache_dir
    from mtdnn.data.sources import canonical_path

    names = [task_names] if isinstance(task_names, str) else list(task_names)
    fmt = output_format(output_path, fmt)
    if batch_size is not None and batch_size <= 0:
        raise MtdnnError(f"batch size {batch_size} is not positive", key="--batch-size",
                         allowed="a whole number >= 1 (default: the run's eval_batch_size)")
    if len(names) > 1 and fmt == "glue":
        raise MtdnnError(f"a GLUE submission file holds one task, {len(names)} were given",
                         key="--format", allowed="--format jsonl or csv with several --task")
    inputs = input_files(source)
    folders = [getattr(c, "checkpoint", c) for c in checkpoints]
    for path in (output_path, metrics_path(output_path)):
        check_output(path, [*inputs, *folders], key="--output", overwrite=overwrite)
    tasks = [checkpoint_task(folders, name) for name in names]
    shared_inputs(tasks)
    input_path = canonical_path(source if isinstance(source, DatasetSource) else str(source),
                                tasks[0], columns or {}, cache_dir or default_cache_dir())
    try:
        return _predict_file(checkpoints, tasks, input_path, output_path, batch_size, fmt,
                             progress, precision)
    except KeyboardInterrupt:
        raise Interrupted("interrupted; no predictions were written", file=output_path
                          ) from None


def input_files(source: Any) -> list[Path]:
    """What an output must never replace: the input file, or the folder of a dataset that
    lives in one (every file in it is the dataset's, its own test.csv too)."""
    from mtdnn.config.train_config import DatasetSource

    if not isinstance(source, DatasetSource):
        return [Path(source)]
    return [Path(source.dataset)] if Path(source.dataset).is_dir() else []


def shared_inputs(tasks: list[TaskDef]) -> None:
    """Several heads read one encoding of the input only if their tasks read the same
    fields."""
    odd = [t for t in tasks if t.inputs != tasks[0].inputs]
    if odd:
        raise MtdnnError(f"task '{odd[0].name}' reads {list(odd[0].inputs)}, task "
                         f"'{tasks[0].name}' reads {list(tasks[0].inputs)}", key="--task",
                         allowed="tasks with the same input fields in one call")
    odd = [t for t in tasks if t.task_type.layout != tasks[0].task_type.layout]
    if odd:
        raise MtdnnError(f"task '{odd[0].name}' ({odd[0].type}) reads its examples otherwise "
                         f"than task '{tasks[0].name}' ({tasks[0].type})", key="--task",
                         allowed="tasks of types that read examples alike in one call "
                                 "(classification, regression), or one call per task")


def _predict_file(checkpoints: list[Any], tasks: list[TaskDef], input_path: Path,
                  output_path: Path, batch_size: int | None, fmt: str, progress: bool,
                  precision: str) -> dict[str, Any]:
    """Each checkpoint (a folder, or a loaded :class:`~mtdnn.inference.predictor.Predictor`) scores
    the file: one way to load a model, resolve its precision and batch its examples."""
    from mtdnn.data.tokenized import check_exists, read_examples, tokenize_examples

    names = [task.name for task in tasks]
    # Every row is checked before a model loads: a bad input is reported at once.
    check_exists(input_path, tasks[0])
    examples = read_examples(input_path, tasks[0], require_labels=False)
    from mtdnn.inference.batched import predict_heads  # the model's code: transformers

    outputs: dict[str, list[Any]] = {name: [] for name in names}
    split = None
    started = time.perf_counter()
    for checkpoint in checkpoints:
        predictor = checkpoint if isinstance(checkpoint, Predictor) else \
            Predictor(checkpoint, precision=precision, batch_size=batch_size)
        split = tokenize_examples(examples, tasks[0], predictor.tokenizer,
                                  predictor.max_seq_len, input_path)
        with tqdm(total=len(split), disable=not progress,
                  desc=f"predict {predictor.checkpoint.name}", unit="ex") as bar:
            predicted = predict_heads(predictor.model, split, predictor.collator,
                                      batch_size or predictor.batch_size, predictor.device,
                                      predictor.amp_dtype, on_batch=bar.update, tasks=tasks)
        for name in names:
            outputs[name].append(predicted[name])
    resolved = predictor.precision
    seconds = time.perf_counter() - started
    predicted = {task.name: ensemble(task, outputs[task.name]) for task in tasks}
    metrics = None
    if split.has_labels and len(tasks) == 1:
        metrics = tasks[0].task_type.score(tasks[0], predicted[names[0]], split.dataset)
    per_task = {t.name: prediction_records(t, split.dataset, predicted[t.name]) for t in tasks}
    if len(tasks) == 1:
        records = per_task[names[0]]
    else:  # one object per example: its uid, then each task's prediction
        records = [{"uid": uid, **{name: {k: v for k, v in per_task[name][i].items()
                                          if k != "uid"} for name in names}}
                   for i, uid in enumerate(r["uid"] for r in per_task[names[0]])]
    write_predictions(output_path, records, fmt, input_path)
    if metrics is not None:
        atomic_write_text(metrics_path(output_path),
                          json.dumps({"task": names[0], "metrics": metrics}, indent=2) + "\n")
    return {"examples": len(split), "seconds": seconds, "metrics": metrics,
            "examples_per_s": len(split) * len(checkpoints) / seconds, "precision": resolved}
