"""Span extraction (extractive question answering, SQuAD v1.1; MT-DNN's ``Span`` type):
the answer is a substring of the context, predicted as a start and an end token.

- **Rows.** A canonical row holds the question and the context (two text fields, the
  question first) and its ``label``: the gold answers, each ``{"text", "start"}`` with the
  character where it starts in the context (the first answer is the one trained on; all
  count for the metrics). The context is stored as it is (never stripped), so that starts
  keep pointing at their texts.
- **Features.** The question and the context are tokenized together, truncated on the
  context only, in windows of ``max_seq_len`` tokens that overlap by ``options.doc_stride``
  tokens (Hugging Face's QA recipe): one example may give several features. A window that
  does not hold the whole answer points at its first token (``[CLS]``). Sampling, batching
  and resuming count features; metrics and predictions are per example.
- **Head and loss:** a start and an end logit per token (dropout → linear to 2), the mean of
  the two cross-entropies (MT-DNN's SpanCe).
- **SMART:** the symmetric KL between the clean and perturbed distributions over the
  window's context tokens, for the start and for the end, averaged.
- **Decoding:** the ``n_best`` highest start and end logits of each window, pairs with
  ``end >= start`` and at most ``options.max_answer_length`` tokens, the best score
  (start + end logit) across the example's windows; its text is cut from the original
  context through the offsets.
- **Metrics:** SQuAD v1.1's official exact match and F1 (lower case, ASCII punctuation,
  articles and extra spaces removed; the maximum over the gold answers).
"""

from __future__ import annotations

import collections
import re
import string
from typing import TYPE_CHECKING, Any

import numpy as np

from mtdnn.tasks.task_type import LabelError, RaggedTaskType, pad_tokens

if TYPE_CHECKING:
    import torch

    from mtdnn.tasks.task_type import TaskDef

OUTSIDE = -1  # the offsets of a token that is not the context's
DEFAULTS = {"doc_stride": 128, "max_answer_length": 30, "n_best": 20}


# ---- SQuAD v1.1's official metric (evaluate-v1.1.py) ------------------------------------
def normalize_answer(text: str) -> str:
    """Lower case, ASCII punctuation and the articles a, an, the removed, spaces collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    ours, theirs = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = collections.Counter(ours) & collections.Counter(theirs)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(ours), same / len(theirs)
    return 2 * precision * recall / (precision + recall)


def best_over_golds(metric: Any, prediction: str, golds: list[str]) -> float:
    return max(metric(prediction, gold) for gold in golds)


# ---- labels ---------------------------------------------------------------------------
class Answers:
    """A label is the list of gold answers, each ``{"text", "start"}``."""

    has_names = False

    @staticmethod
    def width(labels: tuple[str, ...]) -> int:
        return 2  # a start and an end logit per token

    @staticmethod
    def check(labels: tuple[str, ...]) -> tuple[str, str] | None:
        if labels:
            return f"a span task has no labels, found {list(labels)}", "remove the key"
        return None

    @staticmethod
    def parse(value: Any, labels: tuple[str, ...]) -> list[dict[str, Any]]:
        answers = value if isinstance(value, list) else None
        if not answers or not all(isinstance(a, dict) and isinstance(a.get("text"), str)
                                  and a["text"].strip() and isinstance(a.get("start"), int)
                                  and not isinstance(a.get("start"), bool) for a in answers):
            raise LabelError(f"label {value!r} is not a list of answers",
                             'a list of {"text": ..., "start": character} answers')
        return [{"text": a["text"], "start": a["start"]} for a in answers]

    @classmethod
    def canonical(cls, value: Any, labels: tuple[str, ...]) -> list[dict[str, Any]]:
        return cls.parse(value, labels)

    @staticmethod
    def arrow(column: Any, labels: tuple[str, ...]) -> list | None:
        return None  # the line reader checks each answer against its context

    @staticmethod
    def summary(values: Any, labels: tuple[str, ...]) -> dict[str, Any]:
        counts = [len(answers) for answers in values]
        return {"questions": len(counts), "answers": sum(counts)} if counts else {}

    @staticmethod
    def hf_config(labels: tuple[str, ...]) -> dict[str, Any]:
        return {}


class SpanExtraction(RaggedTaskType):
    name = "span_extraction"
    labels = Answers
    metrics = ("exact_match", "f1")
    default_metrics = ("exact_match", "f1")
    divergences = ("symmetric_kl",)
    default_divergence = "symmetric_kl"
    layout = "windows"
    auto_class = "AutoModelForQuestionAnswering"
    export_reads_pooler = False
    export_head = "qa_outputs"
    pipeline_tag = "question-answering"
    options = {"doc_stride": "a whole number >= 1 of tokens two windows share (default 128)",
               "max_answer_length": "a whole number >= 1 of tokens (default 30)",
               "n_best": "a whole number >= 1 of starts and ends tried per window (default 20)"}

    def check_option(self, key: str, value: Any) -> tuple[str, str] | None:
        problem = super().check_option(key, value)
        if problem is None and (isinstance(value, bool) or not isinstance(value, int)
                                or value < 1):
            return f"options.{key} is {value!r}", self.options[key]
        return problem

    def option(self, task: TaskDef, key: str) -> int:
        return int(task.option(key, DEFAULTS[key]))

    def check_inputs(self, inputs: tuple[str, ...]) -> tuple[str, str] | None:
        if len(inputs) != 2:
            return (f"found {len(inputs)} input fields",
                    "two text fields: the question, then the context")
        return None

    def check_fields(self, task: TaskDef, example: dict[str, Any], origin: Any) -> None:
        """Both texts non-empty; an error names the question's id."""
        for name in task.inputs:
            text = example.get(name)
            if not isinstance(text, str) or not text.strip():
                raise origin.error(f"task '{task.name}': question {example.get('uid')!r}: "
                                   f"field '{name}' is missing or empty",
                                   allowed=f"a non-empty {', '.join(task.inputs)} per question")

    def canonical_field(self, value: Any) -> Any:
        return value if isinstance(value, str) else ""  # a context keeps its spaces

    def parse_label(self, task: TaskDef, label: Any, example: dict[str, Any]) -> Any:
        answers = self.labels.parse(label, task.labels)
        context = example[task.inputs[1]]
        for answer in answers:
            start, text = answer["start"], answer["text"]
            if context[start:start + len(text)] != text:
                raise LabelError(
                    f"question {example.get('uid')!r}: answer {text!r} does not start at "
                    f"character {start} of its context (found "
                    f"{context[start:start + len(text)]!r})",
                    "each answer's start: the character where its text begins in the context")
        return answers

    # ---- featurization ----------------------------------------------------------------
    def describe_split(self, rows: int, truncated: int, max_seq_len: int) -> str:
        return (f"{rows} windows of {max_seq_len} tokens, {truncated} contexts cut into "
                "several windows")

    def featurize(self, task: TaskDef, columns: dict[str, list], tokenizer: Any,
                  max_seq_len: int) -> tuple[dict[str, list], int]:
        """One feature per window: its tokens, each token's characters in the context
        (-1 outside it), the example it came from, and (labelled) the first answer's start
        and end token, or [CLS] where the window does not hold it."""
        from mtdnn.errors import MtdnnError

        question_field, context_field = task.inputs
        stride = self.option(task, "doc_stride")
        try:
            encoded = tokenizer(columns[question_field], columns[context_field],
                                truncation="only_second", max_length=max_seq_len,
                                stride=stride, return_overflowing_tokens=True,
                                return_offsets_mapping=True, return_attention_mask=False)
        except Exception as error:  # the tokenizer's message names stride and length
            raise MtdnnError(f"task '{task.name}': cannot cut the contexts into windows of "
                             f"{max_seq_len} tokens overlapping by {stride}: "
                             f"{str(error).splitlines()[0].rstrip(', ')}",
                             key=f"{task.name}.options.doc_stride",
                             allowed="a doc_stride well below max_seq_len minus the longest "
                                     "question's tokens") from None
        out: dict[str, list] = {"uid": [], "input_ids": [], "token_type_ids": [],
                                "offsets": [], context_field: [], "answers": []}
        labelled = "labels" in columns
        if labelled:
            out["labels"] = []
        windows = collections.Counter()
        for feature, example in enumerate(encoded["overflow_to_sample_mapping"]):
            windows[example] += 1
            sequence = encoded.sequence_ids(feature)
            offsets = [list(span) if part == 1 else [OUTSIDE, OUTSIDE]
                       for span, part in zip(encoded["offset_mapping"][feature], sequence,
                                             strict=True)]
            out["uid"].append(columns["uid"][example])
            out["input_ids"].append(encoded["input_ids"][feature])
            if "token_type_ids" in encoded:
                out["token_type_ids"].append(encoded["token_type_ids"][feature])
            out["offsets"].append(offsets)
            out[context_field].append(columns[context_field][example])
            answers = columns["labels"][example] if labelled else []
            out["answers"].append([a["text"] for a in answers])
            if labelled:
                out["labels"].append(answer_tokens(answers[0], offsets))
        out = {key: values for key, values in out.items() if values or key in
               ("labels", "answers")}
        truncated = sum(count > 1 for count in windows.values())  # examples cut in windows
        return out, truncated

    def arrow_types(self) -> dict[str, Any]:
        import pyarrow as pa

        return {**super().arrow_types(), "offsets": pa.list_(pa.list_(pa.int32())),
                "labels": pa.list_(pa.int32()), "answers": pa.list_(pa.string())}

    def collate(self, rows: dict[str, list], pad_token_id: int) -> dict[str, torch.Tensor]:
        """Tokens padded as for a pair; ``context_mask`` marks each window's context tokens;
        ``labels`` ``[features, 2]``: the start and end token."""
        import torch

        batch = pad_tokens(rows, pad_token_id)
        width = batch["input_ids"].shape[1]
        batch["context_mask"] = torch.tensor(
            [[span[0] != OUTSIDE for span in offsets] + [False] * (width - len(offsets))
             for offsets in rows["offsets"]], dtype=torch.bool)
        if "labels" in rows:
            batch["labels"] = torch.tensor(rows["labels"], dtype=torch.long)
        return batch

    # ---- model ------------------------------------------------------------------------
    def head(self, hidden_size: int, task: TaskDef) -> torch.nn.Module:
        from mtdnn.tasks.heads import TokenHead

        return TokenHead(hidden_size, 2, task.dropout)

    def loss(self, logits: Any, labels: Any, label_smoothing: float = 0.0) -> Any:
        """The mean of the start and end tokens' cross-entropies over the window."""
        import torch.nn.functional as F

        logits = logits.float()
        start = F.cross_entropy(logits[..., 0], labels[:, 0], label_smoothing=label_smoothing)
        end = F.cross_entropy(logits[..., 1], labels[:, 1], label_smoothing=label_smoothing)
        return (start + end) / 2

    def divergence(self, name: str, batch: dict[str, Any]) -> Any:
        from mtdnn.tasks.divergences import symmetric_kl
        from mtdnn.tasks.heads import ABSENT_SCORE

        outside = ~batch["context_mask"]

        def over_context(p: Any, q: Any) -> Any:
            p, q = p.float().masked_fill(outside[..., None], ABSENT_SCORE), \
                q.float().masked_fill(outside[..., None], ABSENT_SCORE)
            return (symmetric_kl(p[..., 0], q[..., 0]) + symmetric_kl(p[..., 1], q[..., 1])) / 2

        return over_context

    def hf_recipe(self, task: TaskDef, tokenizer: Any, max_seq_len: int) -> tuple[Any, Any]:
        """Hugging Face's QA example (``run_qa``): the same windows as ours (the tokenizer's
        overflowing windows with the stride, which is how ``prepare_train_features`` cuts
        them), ``start_positions``/``end_positions`` on the answer's first and last token
        or on [CLS], ``DataCollatorWithPadding``; its post-processing (the n-best starts and
        ends, scored by the sum of their logits) is ours. The columns the decoding reads
        ride along; ``Trainer`` keeps them from the model."""
        from transformers import DataCollatorWithPadding

        def tokenize(batch: dict[str, list]) -> dict[str, list]:
            out, _ = self.featurize(task, batch, tokenizer, max_seq_len)
            out["start_positions"] = [labels[0] for labels in out["labels"]]
            out["end_positions"] = [labels[1] for labels in out["labels"]]
            return out

        return tokenize, DataCollatorWithPadding(tokenizer)

    def hf_predictions(self, task: TaskDef, logits: Any, dataset: Any) -> list[np.ndarray]:
        """``Trainer.predict``'s (start, end) logits, padded, as our per-window logits."""
        starts, ends = logits
        out = []
        for feature, offsets in enumerate(dataset["offsets"]):
            values = np.stack([starts[feature, :len(offsets)], ends[feature, :len(offsets)]],
                              axis=-1).astype(np.float32)
            values[[span[0] == OUTSIDE for span in offsets]] = -np.inf
            out.append(values)
        return out

    def hf_outputs(self, output: Any) -> Any:
        import torch

        return torch.stack([output.start_logits, output.end_logits], dim=-1)

    # ---- prediction -------------------------------------------------------------------
    def predict(self, logits: Any, batch: dict[str, Any]) -> list[np.ndarray]:
        """Each window's start and end logits ``[tokens, 2]``, -inf off the context."""
        values = logits.float().masked_fill(~batch["context_mask"][..., None], -np.inf)
        lengths = batch["attention_mask"].sum(-1).tolist()
        values = values.cpu().numpy()
        return [row[:length] for row, length in zip(values, lengths, strict=True)]

    def answers(self, task: TaskDef, predictions: Any, dataset: Any) -> dict[str, dict]:
        """Each example's best answer across its windows: text, characters, score."""
        limit, n_best = self.option(task, "max_answer_length"), self.option(task, "n_best")
        context_field = task.inputs[1]
        # whole columns at once: a dataset read row by row decodes every column each time
        uids, offsets, golds, contexts = (dataset[name] for name in
                                          ("uid", "offsets", "answers", context_field))
        best: dict[str, dict] = {}
        for feature, logits in enumerate(predictions):
            found = best_span(logits, offsets[feature], limit, n_best)
            uid = uids[feature]
            if uid not in best:
                best[uid] = {"answer": "", "start": 0, "end": 0, "score": -np.inf,
                             "golds": golds[feature]}
            if found is not None and found[2] > best[uid]["score"]:
                start, end, score = found
                best[uid].update(answer=contexts[feature][start:end], start=start, end=end,
                                 score=score)
        return best

    def score(self, task: TaskDef, predictions: Any, dataset: Any) -> dict[str, float]:
        found = self.answers(task, predictions, dataset).values()
        values = {"exact_match": np.mean([best_over_golds(exact_match, a["answer"], a["golds"])
                                          for a in found]),
                  "f1": np.mean([best_over_golds(token_f1, a["answer"], a["golds"])
                                 for a in found])}
        return {name: float(values[name]) for name in task.metrics}

    def records(self, task: TaskDef, predictions: Any, dataset: Any) -> list[dict[str, Any]]:
        """Per question, in order: the answer's text, its characters in the context and its
        score (start + end logit)."""
        return [{"uid": uid, "answer": a["answer"], "start": a["start"], "end": a["end"],
                 "score": round(float(a["score"]), 6)}
                for uid, a in self.answers(task, predictions, dataset).items()]


def answer_tokens(answer: dict[str, Any], offsets: list[list[int]]) -> list[int]:
    """The first and last token of ``answer`` in a window, or [0, 0] where the window does
    not hold all of it."""
    start, end = answer["start"], answer["start"] + len(answer["text"])
    inside = [i for i, (a, b) in enumerate(offsets) if a != OUTSIDE]
    if not inside or offsets[inside[0]][0] > start or offsets[inside[-1]][1] < end:
        return [0, 0]
    first = next(i for i in inside if offsets[i][1] > start)
    last = next(i for i in reversed(inside) if offsets[i][0] < end)
    return [first, last]


def best_span(logits: np.ndarray, offsets: list[list[int]], limit: int, n_best: int
              ) -> tuple[int, int, float] | None:
    """The best (start character, end character, score) of one window: among its
    ``n_best`` start and end tokens, pairs on the context, in order, at most ``limit``
    tokens long."""
    starts = np.argsort(-logits[:, 0], kind="stable")[:n_best]
    ends = np.argsort(-logits[:, 1], kind="stable")[:n_best]
    best = None
    for s in starts:
        for e in ends:
            if offsets[s][0] == OUTSIDE or offsets[e][0] == OUTSIDE or e < s \
                    or e - s + 1 > limit:
                continue
            score = float(logits[s, 0] + logits[e, 1])
            if best is None or score > best[2]:
                best = (offsets[s][0], offsets[e][1], score)
    return best


TASK_TYPE = SpanExtraction()
