"""What a task type is: everything one kind of task brings, as one :class:`TaskType`.

A type owns, for its tasks:

- **its labels** (``labels``: what a label is, how a data file writes it, how it is checked);
- **featurization** (:meth:`TaskType.featurize`): tokenizing an example's fields and aligning
  its label (per example, per word, per candidate);
- **collation** (:meth:`TaskType.collate`): padding a batch, with -100 where a label is absent;
- **its head** on the encoder's outputs (:meth:`TaskType.head`, :mod:`mtdnn.tasks.heads`);
- **its loss** and **its SMART divergences** (:meth:`TaskType.loss`,
  :meth:`TaskType.divergence`);
- **decoding** (:meth:`TaskType.predict`, :meth:`TaskType.gather`): head outputs → per-example
  predictions, ragged where the type's outputs are;
- **its metrics, its prediction records and its Hugging Face export class.**

Each type is a module of :mod:`mtdnn.tasks.types`, registered there; nothing else in the
package asks which type a task is. This base class is the sentence-level behaviour that
classification and regression share (one encoding of one text or a pair, one row of head
outputs per example); a type overrides what differs.

Torch is imported inside the methods, so that reading task definitions (data preparation,
config validation) does not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

# Labels a loss and a metric skip: a sub-word after a word's first, padding.
IGNORED = -100

TOKENIZE_CHUNK = 1000  # examples per tokenizer call


class TaskDef(Protocol):
    """What a type reads of a task definition (:class:`mtdnn.tasks.task_def.TaskDef`,
    which the types sit below)."""

    name: str
    type: str
    inputs: tuple[str, ...]
    labels: tuple[str, ...]
    metrics: tuple[str, ...]
    dropout: float
    options: dict[str, Any]
    task_type: Any  # its TaskType

    def option(self, name: str, default: Any = None) -> Any: ...


class Origin(Protocol):
    """Where a row came from (:class:`mtdnn.tasks.rows.Origin`)."""

    def error(self, problem: str, key: str | None = None, allowed: str | None = None
              ) -> Exception: ...


class LabelError(ValueError):
    """A label the task cannot take: ``problem`` and what is ``allowed``."""

    def __init__(self, problem: str, allowed: str) -> None:
        super().__init__(problem)
        self.problem, self.allowed = problem, allowed


class RowError(ValueError):
    """A row (or a group of rows) the task cannot read: ``problem``, what is ``allowed``,
    and the position of the offending row in the file's examples (0-based)."""

    def __init__(self, problem: str, allowed: str, index: int) -> None:
        super().__init__(problem)
        self.problem, self.allowed, self.index = problem, allowed, index


class TaskType:
    """How one kind of task is featurized, trained, regularised, predicted and scored."""

    name: str
    labels: Any  # what a label is: a class like ClassLabels (types/classification.py)
    metrics: tuple[str, ...]
    default_metrics: tuple[str, ...]  # a task definition that names none gets these
    divergences: tuple[str, ...]
    default_divergence: str
    # Tasks whose types featurize alike (and read the same fields) share one encoder pass
    # when predicted together.
    layout = "texts"
    extra_fields: tuple[str, ...] = ()  # canonical fields read besides uid, inputs, label
    auto_class = "AutoModelForSequenceClassification"  # its Hugging Face export class
    export_reads_pooler = True  # the export's head reads the pooler output (not each token)
    export_head = "classifier"  # the export class's linear head, which takes ours
    pipeline_tag = "text-classification"  # the Hugging Face pipeline its export serves
    target_dtype = "long"  # torch dtype name of the training targets

    # ---- task definitions -------------------------------------------------------------
    def check_inputs(self, inputs: tuple[str, ...]) -> tuple[str, str] | None:
        """(problem, allowed) if a task of this type cannot read ``inputs``."""
        if not 1 <= len(inputs) <= 2:
            return f"found {len(inputs)} input fields", "one text field or a pair"
        return None

    # the keys a task definition's ``options:`` may set, with what each allows
    options: dict[str, str] = {}

    def check_option(self, key: str, value: Any) -> tuple[str, str] | None:
        """(problem, allowed) if a task of this type cannot take ``options.<key>: value``."""
        if key not in self.options:
            allowed = ", ".join(self.options) or f"none (a {self.name} task has no options)"
            return f"unknown option '{key}'", allowed
        return None

    def check_definition(self, task: TaskDef) -> tuple[str, str, str] | None:
        """(key, problem, allowed) if the definition's keys do not fit together."""
        return None

    def check_installed(self, task: TaskDef) -> None:
        """Raise before training if what the type's metrics need is not installed."""

    def width(self, task: TaskDef) -> int:
        """Outputs per row of the head (per example, per token, per candidate)."""
        return self.labels.width(task.labels)

    # ---- rows ---------------------------------------------------------------------------
    def check_fields(self, task: TaskDef, example: dict[str, Any], origin: Origin) -> None:
        """Each input field holds non-empty text."""
        for name in task.inputs:
            text = example.get(name)
            if text is None or (isinstance(text, str) and not text.strip()):
                raise origin.error(f"task '{task.name}': field '{name}' is missing or empty",
                                   allowed=f"rows with non-empty {', '.join(task.inputs)}")
            if not isinstance(text, str):
                raise origin.error(f"task '{task.name}': field '{name}' holds {text!r} "
                                   f"({type(text).__name__}), not text",
                                   allowed=f"text in {', '.join(task.inputs)}")

    def user_field(self, value: Any, where: str) -> Any:
        """A field of an example given in memory (``Predictor.predict``), as featurization
        reads it; an error says ``where`` it is."""
        from mtdnn.errors import MtdnnError

        if not isinstance(value, str):
            raise MtdnnError(f"{where} is {value!r} ({type(value).__name__}), not text",
                             key="examples", allowed="non-empty strings")
        if not value.strip():
            raise MtdnnError(f"{where} is empty", key="examples", allowed="non-empty strings")
        return value

    def canonical_field(self, value: Any) -> Any:
        """A raw file's field as canonical JSONL stores it: text stripped (a list of words
        as it is, each word is checked)."""
        return value if isinstance(value, list) else (value or "").strip()

    def parse_label(self, task: TaskDef, label: Any, example: dict[str, Any]) -> Any:
        """A row's label as training reads it (raises :class:`LabelError`)."""
        return self.labels.parse(label, task.labels)

    def check_columns(self, task: TaskDef, columns: dict[str, list]) -> None:
        """Checks across rows (raises :class:`RowError`); sentence-level rows stand alone."""

    # ---- featurization and collation ------------------------------------------------------
    def featurize(self, task: TaskDef, columns: dict[str, list], tokenizer: Any,
                  max_seq_len: int) -> tuple[dict[str, list], int]:
        """Columns (``uid``, the inputs[, ``labels``]) → tokenized columns, and how many
        examples were truncated (longest text first)."""
        out: dict[str, list] = {"input_ids": [], "token_type_ids": []}
        truncated = 0
        for start in range(0, len(columns["uid"]), TOKENIZE_CHUNK):
            texts = [columns[name][start:start + TOKENIZE_CHUNK] for name in task.inputs]
            ids, types, cut = encode_texts(tokenizer, texts, max_seq_len)
            out["input_ids"].extend(ids)
            out["token_type_ids"].extend(types)
            truncated += cut
        out = {key: values for key, values in out.items() if values}
        out["uid"] = columns["uid"]
        if "labels" in columns:
            out["labels"] = columns["labels"]
        return out, truncated

    def describe_split(self, rows: int, truncated: int, max_seq_len: int) -> str:
        """How a loaded split is described in the log: its rows and what featurize cut."""
        return f"{rows} examples, {truncated} truncated to {max_seq_len} tokens"

    def arrow_types(self) -> dict[str, Any]:
        """Arrow types of the tokenized columns: a smaller cache, built faster than from
        Python's int64 guesses."""
        import pyarrow as pa

        return {"input_ids": pa.list_(pa.int32()), "token_type_ids": pa.list_(pa.int8())}

    def lengths(self, dataset: Any) -> np.ndarray:
        """Each example's tokens: prediction runs the longest first, so batches pad little."""
        return np.array([len(ids) for ids in dataset["input_ids"]])

    def collate(self, rows: dict[str, list], pad_token_id: int) -> dict[str, torch.Tensor]:
        """Pad a list of tokenized examples to the longest one in the batch."""
        import torch

        batch = pad_tokens(rows, pad_token_id)
        if "labels" in rows:
            batch["labels"] = torch.tensor(rows["labels"], dtype=getattr(torch, self.target_dtype))
        return batch

    # ---- model ----------------------------------------------------------------------------
    def head(self, hidden_size: int, task: TaskDef) -> torch.nn.Module:
        """MT-DNN's head: dropout → linear on the pooled representation."""
        from mtdnn.tasks.heads import PooledHead

        return PooledHead(hidden_size, self.width(task), task.dropout)

    def loss(self, outputs: torch.Tensor, labels: torch.Tensor,
             label_smoothing: float = 0.0) -> torch.Tensor:
        raise NotImplementedError

    def divergence(self, name: str, batch: dict[str, torch.Tensor]
                   ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """SMART's ℓ_s called ``name`` for the outputs of ``batch``."""
        from mtdnn.tasks import divergences

        return getattr(divergences, name)

    # ---- prediction ---------------------------------------------------------------------
    def predict(self, outputs: torch.Tensor, batch: dict[str, torch.Tensor]) -> Any:
        """One batch's head outputs → its predictions, on the host."""
        raise NotImplementedError

    def gather(self, parts: list[Any], order: np.ndarray) -> Any:
        """The batches' predictions, put back in the split's order (``order[i]`` is the
        position of the i-th example predicted)."""
        joined = np.concatenate(parts)
        predictions = np.empty_like(joined)
        predictions[order] = joined
        return predictions

    def ensemble(self, predictions: list[Any]) -> Any:
        """The mean of several models' predictions (probabilities, scores)."""
        return np.mean(np.stack(predictions), axis=0)

    def entropy(self, predictions: Any) -> float | None:
        """Mean entropy (nats) of predicted distributions, where the type has them."""
        return None

    def decide(self, predictions: Any) -> Any:
        """Predictions → decisions (a class index, a score) per example."""
        return predictions

    def score(self, task: TaskDef, predictions: Any, dataset: Any) -> dict[str, float]:
        """The task's metrics of ``predictions`` on a labelled split's ``dataset``."""
        from mtdnn.tasks.metrics import compute_metrics

        return compute_metrics(task.metrics, self.decide(predictions),
                               np.asarray(dataset["labels"]))

    def records(self, task: TaskDef, predictions: Any, dataset: Any) -> list[dict[str, Any]]:
        """One output object per example of ``dataset``: ``uid`` and the prediction."""
        decided = self.decide(predictions)
        return [{"uid": uid, **self.labels.record(label, values, task.labels)}
                for uid, label, values in zip(dataset["uid"], decided, predictions,
                                              strict=True)]

    # ---- the Hugging Face Trainer baseline (mtdnn.training.hf_trainer) -------------------
    def hf_recipe(self, task: TaskDef, tokenizer: Any, max_seq_len: int) -> tuple[Any, Any]:
        """How Hugging Face's own example trains this type: a function tokenizing a batch of
        examples (``datasets.map``), and its data collator."""
        from transformers import DataCollatorWithPadding

        def tokenize(batch: dict[str, list]) -> Any:
            return tokenizer(*[batch[f] for f in task.inputs], truncation=True,
                             max_length=max_seq_len)

        return tokenize, DataCollatorWithPadding(tokenizer)

    def hf_predictions(self, task: TaskDef, logits: np.ndarray, dataset: Any) -> Any:
        """``Trainer.predict``'s logits for ``dataset`` as this type's predictions."""
        import torch

        return self.predict(torch.from_numpy(logits), {})

    # ---- export -------------------------------------------------------------------------
    def hf_outputs(self, output: Any) -> torch.Tensor:
        """The export class's output as this type's head outputs (to check the export)."""
        return output.logits

    def hf_labels(self, task: TaskDef) -> dict[str, Any]:
        """The Hugging Face config's label keys for an export of ``task``."""
        return {"num_labels": self.width(task), **self.labels.hf_config(task.labels)}


class RaggedTaskType(TaskType):
    """A type whose predictions are per example and of different sizes (a group's
    candidates, a sentence's words, a question's windows): lists of arrays, put back in the
    split's order and averaged example by example."""

    def gather(self, parts: list[Any], order: np.ndarray) -> list[Any]:
        return gather_ragged(parts, order)

    def ensemble(self, predictions: list[list[np.ndarray]]) -> list[np.ndarray]:
        return [np.mean(np.stack(found), axis=0) for found in zip(*predictions, strict=True)]


def first_duplicate(names: tuple[str, ...]) -> str | None:
    """The first (in sorted order) name given more than once, for a label list's check."""
    repeated = sorted({x for x in names if names.count(x) > 1})
    return repeated[0] if repeated else None


def encode_texts(tokenizer: Any, texts: list[list[str]], max_seq_len: int
                 ) -> tuple[list[list[int]], list[list[int]], int]:
    """Token ids and segment ids of one text or a pair per example, truncated to
    ``max_seq_len`` (longest text first), and how many examples were cut."""
    # No attention mask: stored rows have no padding, so the collator derives it.
    encoded = tokenizer(*texts, truncation=True, max_length=max_seq_len,
                        return_attention_mask=False)
    # Only an example that fills max_seq_len can have been cut: re-encode those few in full
    # to count them (cheaper than asking every example for its overflow).
    full = [i for i, ids in enumerate(encoded["input_ids"]) if len(ids) == max_seq_len]
    truncated = 0
    if full:
        whole = tokenizer(*[[t[i] for i in full] for t in texts],
                          return_attention_mask=False, return_token_type_ids=False)
        truncated = sum(len(ids) > max_seq_len for ids in whole["input_ids"])
    return encoded["input_ids"], encoded.get("token_type_ids", []), truncated


def gather_ragged(parts: list[list[Any]], order: np.ndarray) -> list[Any]:
    """Per-example predictions of different sizes (a group's candidates, a sentence's
    words), the batches' lists put back in the split's order."""
    flat = [item for part in parts for item in part]
    predictions: list[Any] = [None] * len(flat)
    for position, item in zip(order, flat, strict=True):
        predictions[position] = item
    return predictions


def pad_tokens(rows: dict[str, list], pad_token_id: int) -> dict[str, torch.Tensor]:
    """``input_ids`` (and ``token_type_ids``) padded to the longest row, with the attention
    mask that marks the real tokens."""
    import torch

    ids = rows["input_ids"]
    lengths = torch.tensor([len(x) for x in ids])
    width = int(lengths.max())
    batch = {"attention_mask": (torch.arange(width) < lengths[:, None]).long()}
    for key, pad in (("input_ids", pad_token_id), ("token_type_ids", 0)):
        if key in rows:
            batch[key] = torch.tensor([x + [pad] * (width - len(x)) for x in rows[key]],
                                      dtype=torch.long)
    return batch
