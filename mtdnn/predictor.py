"""Prediction from Python: load a checkpoint once, score examples in memory with any of its
heads.

    from mtdnn import Predictor

    predictor = Predictor("runs/mtdnn_glue/best")
    predictor.predict([("A man plays.", "Someone plays.")], tasks=["rte", "mnli"])
    # [{"rte": {"prediction": "entailment", "probabilities": {...}},
    #   "mnli": {"prediction": "entailment", "probabilities": {...}}}]

The encoder runs once per batch for all requested heads (they read the same pooled output),
so asking for several tasks costs little more than asking for one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtdnn.errors import MtdnnError

Example = str | Sequence[str] | dict[str, str]


class Predictor:
    """A checkpoint's model and tokenizer, loaded once, on CUDA with bf16/fp16 where the
    hardware has them (``precision="auto"``)."""

    def __init__(self, checkpoint: str | Path, precision: str = "auto",
                 batch_size: int | None = None) -> None:
        from mtdnn.checkpoint import load_checkpoint_tasks, load_model
        from mtdnn.data import Collator
        from mtdnn.precision import AMP_DTYPES, inference_device
        from mtdnn.schema import load_yaml

        self.checkpoint = Path(checkpoint)
        self.tasks = load_checkpoint_tasks(self.checkpoint)
        saved = load_yaml(self.checkpoint / "config.yaml") or {}
        self.max_seq_len = saved.get("max_seq_len", 128)
        self.batch_size = batch_size or saved.get("eval_batch_size", 128)
        self.device, native = inference_device()
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
        (or score). An example is a text, a pair of texts (a tuple or list), or a mapping
        of the tasks' input fields; ``tasks`` defaults to all the checkpoint's heads that
        read as many texts as the examples have."""
        from mtdnn.data import tokenize_examples
        from mtdnn.inference import predict_heads

        if not examples:
            return []
        chosen = self._tasks(tasks, examples[0])
        widths = {t.name: len(t.inputs) for t in chosen}
        if len(set(widths.values())) > 1:  # one encoding serves heads that read as many texts
            raise MtdnnError(f"the tasks read different numbers of texts: {widths}",
                             key="tasks", allowed="tasks that all read one text or all a pair")
        fields = chosen[0].inputs
        columns: dict[str, list] = {"uid": [str(i) for i in range(len(examples))],
                                    **{name: [] for name in fields}}
        for number, example in enumerate(examples):
            for name, text in zip(fields, self._texts(example, fields, number), strict=True):
                columns[name].append(text)
        split = tokenize_examples(columns, chosen[0], self.tokenizer, self.max_seq_len)
        predicted = predict_heads(self.model, split, self.collator, self.batch_size,
                                  self.device, self.amp_dtype, tasks=chosen)
        results: list[dict[str, dict[str, Any]]] = [{} for _ in examples]
        for task in chosen:
            decided = task.task_type.decide(predicted[task.name])
            for i, (label, values) in enumerate(zip(decided, predicted[task.name],
                                                    strict=True)):
                results[i][task.name] = task.task_type.labels.record(label, values,
                                                                     task.labels)
        return results

    def _tasks(self, names: Sequence[str] | None, first: Example) -> list:
        if names is None:
            width = len(self._texts(first, None, 0))
            found = [t for t in self.tasks.values() if len(t.inputs) == width]
            if not found:
                raise MtdnnError(f"no task of this checkpoint reads {width} text(s)",
                                 file=self.checkpoint, key="tasks",
                                 allowed=", ".join(f"{t.name} ({len(t.inputs)})"
                                                   for t in self.tasks.values()))
            return found
        if isinstance(names, str):
            names = [names]
        unknown = [n for n in names if n not in self.tasks]
        if unknown:
            raise MtdnnError(f"task '{unknown[0]}' is not in this checkpoint",
                             file=self.checkpoint, key="tasks", allowed=", ".join(self.tasks))
        return [self.tasks[n] for n in names]

    @staticmethod
    def _texts(example: Example, fields: tuple[str, ...] | None, number: int) -> tuple:
        if isinstance(example, str):
            texts: tuple = (example,)
        elif isinstance(example, dict):  # the first task's field names
            if fields is None:
                return tuple(example.values())
            missing = [f for f in fields if not isinstance(example.get(f), str)]
            if missing:
                raise MtdnnError(f"example {number} has no text '{missing[0]}'",
                                 key="examples", allowed=f"mappings with {', '.join(fields)}")
            texts = tuple(example[f] for f in fields)
        else:
            texts = tuple(example)
        if fields is not None and len(texts) != len(fields):
            raise MtdnnError(f"example {number} has {len(texts)} text(s), the tasks read "
                             f"{len(fields)} ({', '.join(fields)})", key="examples",
                             allowed="a text, a pair of texts, or a mapping of fields")
        if fields is not None and not all(isinstance(t, str) and t.strip() for t in texts):
            raise MtdnnError(f"example {number} has an empty or non-text field",
                             key="examples", allowed="non-empty strings")
        return texts
