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

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtdnn.errors import MtdnnError

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

        from mtdnn.checkpoint import load_checkpoint_tasks, load_model, saved_run_config
        from mtdnn.data import Collator
        from mtdnn.precision import AMP_DTYPES, inference_device, native_precision

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
        from mtdnn.inference import task_groups

        examples = as_examples(examples)
        if not examples:
            return []
        chosen = self._tasks(tasks, examples[0])
        results: list[dict[str, dict[str, Any]]] = [{} for _ in examples]
        records = isinstance(examples[0], dict)
        for fields, group in task_groups(chosen, by_name=records).items():
            columns = {"uid": [str(i) for i in range(len(examples))],
                       **{name: [] for name in fields}}
            for number, example in enumerate(examples):
                for name, text in zip(fields, texts_of(example, fields, number), strict=True):
                    columns[name].append(text)
            for name, values in self.predict_columns(columns, group).items():
                for i, value in enumerate(values):
                    results[i][name] = value
        return results

    def predict_columns(self, columns: dict[str, list], tasks: list) -> dict[str, list]:
        """Each of ``tasks``' output records for examples given as columns (``uid`` and the
        tasks' shared input fields): one encoder pass per batch for all of them."""
        from mtdnn.data import tokenize_examples
        from mtdnn.inference import predict_heads

        split = tokenize_examples(columns, tasks[0], self.tokenizer, self.max_seq_len)
        predicted = predict_heads(self.model, split, self.collator, self.batch_size,
                                  self.device, self.amp_dtype, tasks=tasks)
        out = {}
        for task in tasks:
            decided = task.task_type.decide(predicted[task.name])
            out[task.name] = [task.task_type.labels.record(label, values, task.labels)
                              for label, values in zip(decided, predicted[task.name],
                                                       strict=True)]
        return out

    def predict_file(self, source: Any, output: str | Path, tasks: Sequence[str] | str,
                     columns: dict[str, str] | None = None, fmt: str | None = None,
                     overwrite: bool = False, progress: bool = False) -> dict[str, Any]:
        """Score a data source as training reads it (canonical JSONL, a CSV, TSV or Parquet
        file, or a :class:`~mtdnn.sources.DatasetSource`, with ``columns`` mapping the
        tasks' fields to its columns) and write the predictions to ``output``: JSONL, CSV
        (``.csv``, or ``fmt``) or a GLUE TSV. Returns the count, speed and, for labelled
        input and one task, the metrics (also written beside the output)."""
        from mtdnn.inference import predict_file

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


def texts_of(example: Any, fields: tuple[str, ...], number: int) -> tuple[str, ...]:
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
    for name, text in zip(fields, texts, strict=True):
        if not isinstance(text, str):
            raise MtdnnError(f"example {number}: '{name}' is {text!r} "
                             f"({type(text).__name__}), not text", key="examples",
                             allowed="non-empty strings")
        if not text.strip():
            raise MtdnnError(f"example {number}: '{name}' is empty", key="examples",
                             allowed="non-empty strings")
    return texts
