"""Token classification (named-entity recognition and other tagging): one tag per word, in
IOB2 (``B-TYPE`` begins an entity, ``I-TYPE`` continues it, ``O`` is outside any).

- **Rows.** A canonical row holds the sentence's words (a list of strings, in the task's one
  input field) and its ``label``: one tag per word, each in the task's tag list, in valid
  IOB2 (an ``I-TYPE`` follows a ``B-TYPE`` or ``I-TYPE`` of the same type).
- **Alignment** (Hugging Face's token-classification recipe): a word's tag goes on its first
  sub-word; the other sub-words get -100 and count for neither the loss nor the metrics.
  ``options: {label_all_subwords: true}`` labels them all (a ``B-`` word's continuation
  sub-words with its ``I-`` tag).
- **Head:** dropout → linear on every token's hidden state; cross-entropy over the labelled
  tokens.
- **SMART:** the symmetric KL between the clean and perturbed tag distributions of each
  labelled token, averaged over them (:func:`mtdnn.tasks.divergences.masked_symmetric_kl`).
- **Prediction:** each word's tag (its first sub-word's); a text given to ``Predictor`` is
  split into words as the tokenizer splits it (at spaces and punctuation, as Hugging Face's
  pipeline does), and its entities also carry their characters. A word cut off by ``max_seq_len``
  (or that the tokenizer turns into nothing) is tagged ``O``. An ``I-TYPE`` that no entity
  of its type precedes begins one, as conlleval and Hugging Face's token-classification
  pipeline read it. Entities: type, first and last word, text.
- **Metrics:** entity-level precision, recall and F1 with ``seqeval`` in strict IOB2 mode, on
  the words the model saw.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from mtdnn.tasks.iob import entities, iob2_problem, repair_iob2
from mtdnn.tasks.task_type import (
    IGNORED,
    TOKENIZE_CHUNK,
    LabelError,
    RaggedTaskType,
    first_duplicate,
    pad_tokens,
)

if TYPE_CHECKING:
    import torch

    from mtdnn.tasks.task_type import Origin, TaskDef

# word_starts of a word the model did not see, and of padding
UNSEEN, PADDED = -1, -2


def words_of(tokenizer: Any, text: str) -> list[tuple[str, tuple[int, int]]]:
    """A text's words as the tokenizer's pre-tokenizer splits it (BERT's: at spaces and
    punctuation), with their characters: what Hugging Face's token-classification pipeline
    calls words, so that a text gets the same entities from both."""
    pre = getattr(getattr(tokenizer, "backend_tokenizer", None), "pre_tokenizer", None)
    if pre is not None:
        return [(word, tuple(span)) for word, span in pre.pre_tokenize_str(text)]
    import re

    return [(m.group(), m.span()) for m in re.finditer(r"\S+", text)]


def joined_spans(words: list[str]) -> list[tuple[str, tuple[int, int]]]:
    """Words with their characters in the words joined by spaces."""
    spans, start = [], 0
    for word in words:
        spans.append((word, (start, start + len(word))))
        start += len(word) + 1
    return spans


class TagLabels:
    """A label is a sentence's list of tags, one per word, from the task's tag list."""

    has_names = True

    @staticmethod
    def width(labels: tuple[str, ...]) -> int:
        return len(labels)

    @staticmethod
    def check(labels: tuple[str, ...]) -> tuple[str, str] | None:
        allowed = "O and, for each entity type, B-TYPE and I-TYPE (IOB2)"
        if "O" not in labels:
            return f"the tag list {list(labels)} has no 'O'", allowed
        if (duplicate := first_duplicate(labels)) is not None:
            return f"duplicate tag '{duplicate}'", "distinct tags"
        odd = [tag for tag in labels if tag != "O" and tag[:2] not in ("B-", "I-")]
        if odd or any(len(tag) < 3 for tag in labels if tag != "O"):
            return f"tag {(odd or [labels[0]])[0]!r} is neither O, B-TYPE nor I-TYPE", allowed
        for tag in labels:
            partner = {"B-": "I-", "I-": "B-"}.get(tag[:2], "") + tag[2:]
            if tag != "O" and partner not in labels:
                return f"tag '{tag}' has no '{partner}'", allowed
        return None

    @staticmethod
    def parse(value: Any, labels: tuple[str, ...]) -> list[int]:
        """Tags by name, or by their positions in the task's list (as a Hugging Face
        ``Sequence(ClassLabel)`` column stores them, e.g. the hub's ``conll2003``)."""
        if isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                           and 0 <= t < len(labels) for t in value):
            value = [labels[t] for t in value]
        if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
            raise LabelError(f"label {value!r} is not a list of tags",
                             f"a list of tags, one per word, by name or by position "
                             f"(0-{len(labels) - 1})")
        for position, tag in enumerate(value):
            if tag not in labels:
                raise LabelError(f"tag {tag!r} at word {position + 1} is not one of the "
                                 "task's tags", ", ".join(labels))
        problem = iob2_problem(value)
        if problem:
            raise LabelError(problem[1], "valid IOB2 (prepare IOB1 data with data_prep, which "
                                         "converts it)")
        return [labels.index(tag) for tag in value]

    @classmethod
    def canonical(cls, value: Any, labels: tuple[str, ...]) -> list[str]:
        tags = [str(tag).strip() for tag in value]
        cls.parse(tags, labels)
        return tags

    @staticmethod
    def arrow(column: Any, labels: tuple[str, ...]) -> list | None:
        return None  # lists of tags: the line-by-line reader checks each against its words

    @staticmethod
    def summary(values: Iterable[Any], labels: tuple[str, ...]) -> dict[str, Any]:
        """Entities per type (its B- tags) and the words outside any."""
        counts = Counter(tag for tags in values for tag in tags)
        summary = {tag[2:]: counts[tag] for tag in labels if tag.startswith("B-") and counts[tag]}
        return {**summary, "O (words)": counts["O"]}

    @staticmethod
    def hf_config(labels: tuple[str, ...]) -> dict[str, Any]:
        return {"id2label": dict(enumerate(labels)),
                "label2id": {label: i for i, label in enumerate(labels)}}


class TokenClassification(RaggedTaskType):
    name = "token_classification"
    labels = TagLabels
    metrics = ("entity_f1", "entity_precision", "entity_recall")
    default_metrics = ("entity_f1", "entity_precision", "entity_recall")
    divergences = ("symmetric_kl",)
    default_divergence = "symmetric_kl"
    layout = "words"
    auto_class = "AutoModelForTokenClassification"
    export_reads_pooler = False
    pipeline_tag = "token-classification"
    options = {"label_all_subwords": "true or false (default false: only a word's first "
                                     "sub-word carries its tag)"}

    def check_option(self, key: str, value: Any) -> tuple[str, str] | None:
        problem = super().check_option(key, value)
        if problem is None and not isinstance(value, bool):
            return f"options.{key} is {value!r}", self.options[key]
        return problem

    def check_installed(self, task: TaskDef) -> None:
        import importlib.util

        from mtdnn.errors import MtdnnError

        if importlib.util.find_spec("seqeval") is None:
            raise MtdnnError(f"task '{task.name}' is scored with seqeval, which is not "
                             "installed", key=f"tasks.{task.name}",
                             allowed="pip install 'mtdnn[ner]' (or pip install seqeval)")

    def check_inputs(self, inputs: tuple[str, ...]) -> tuple[str, str] | None:
        if len(inputs) != 1:
            return (f"found {len(inputs)} input fields",
                    "one field holding each sentence's words (e.g. [tokens])")
        return None

    def check_fields(self, task: TaskDef, example: dict[str, Any], origin: Origin) -> None:
        field = task.inputs[0]
        words = example.get(field)
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise origin.error(f"task '{task.name}': field '{field}' holds "
                               f"{type(words).__name__ if words is not None else 'nothing'}, "
                               "not a list of words", allowed="a list of strings, one per word")
        if not words:
            raise origin.error(f"task '{task.name}': the sentence has no words",
                               allowed="at least one word per sentence")
        empty = next((i for i, word in enumerate(words) if not word.strip()), None)
        if empty is not None:
            raise origin.error(f"task '{task.name}': word {empty + 1} is empty",
                               allowed="non-empty words")

    def user_field(self, value: Any, where: str) -> str | list[str]:
        """A sentence as a text (split into words as the tokenizer splits it: at spaces and
        punctuation) or a list of words."""
        from mtdnn.errors import MtdnnError

        words = value.split() if isinstance(value, str) else value
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip()
                                                  for w in words) or not words:
            raise MtdnnError(f"{where} is {value!r}, not a sentence", key="examples",
                             allowed="a non-empty text or a list of non-empty words")
        return value

    def parse_label(self, task: TaskDef, label: Any, example: dict[str, Any]) -> list[int]:
        words = example[task.inputs[0]]
        if isinstance(label, list) and len(label) != len(words):
            raise LabelError(f"{len(words)} words but {len(label)} tags",
                             "one tag per word")
        return self.labels.parse(label, task.labels)

    # ---- featurization ------------------------------------------------------------------
    def featurize(self, task: TaskDef, columns: dict[str, list], tokenizer: Any,
                  max_seq_len: int) -> tuple[dict[str, list], int]:
        """Sub-word ids per sentence, each word's first sub-word position (``word_starts``,
        -1 for a word cut off) and, in a labelled split, each sub-word's tag index (-100 but
        on first sub-words, unless ``label_all_subwords``)."""
        sentences = columns[task.inputs[0]]
        spans = None
        if any(isinstance(sentence, str) for sentence in sentences):  # texts (Predictor)
            texts = [s if isinstance(s, str) else " ".join(s) for s in sentences]
            spans = [words_of(tokenizer, s) if isinstance(s, str) else joined_spans(s)
                     for s in sentences]
            sentences = [[word for word, _ in found] for found in spans]
        tag_ids = columns.get("labels")
        all_subwords = bool(task.option("label_all_subwords", False))
        continuation = self._continuations(task.labels)
        out: dict[str, list] = {"input_ids": [], "token_type_ids": [], "word_starts": [],
                                **({"labels": []} if tag_ids is not None else {})}
        truncated = 0
        for start in range(0, len(sentences), TOKENIZE_CHUNK):
            chunk = sentences[start:start + TOKENIZE_CHUNK]
            encoded = tokenizer(chunk, is_split_into_words=True, truncation=True,
                                max_length=max_seq_len, return_attention_mask=False)
            for i, words in enumerate(chunk):
                word_ids = encoded.word_ids(i)
                starts = [UNSEEN] * len(words)
                for position, word in enumerate(word_ids):
                    if word is not None and starts[word] == UNSEEN:
                        starts[word] = position
                last_seen = max((w for w in word_ids if w is not None), default=-1)
                truncated += len(word_ids) == max_seq_len and last_seen < len(words) - 1
                out["input_ids"].append(encoded["input_ids"][i])
                if "token_type_ids" in encoded:
                    out["token_type_ids"].append(encoded["token_type_ids"][i])
                out["word_starts"].append(starts)
                if tag_ids is not None:
                    sentence_tags = tag_ids[start + i]
                    labels = [IGNORED] * len(word_ids)
                    for position, word in enumerate(word_ids):
                        if word is None:
                            continue
                        if position == starts[word]:
                            labels[position] = sentence_tags[word]
                        elif all_subwords:
                            labels[position] = continuation[sentence_tags[word]]
                    out["labels"].append(labels)
        out = {key: values for key, values in out.items() if values or key == "labels"}
        out["uid"] = columns["uid"]
        out[task.inputs[0]] = sentences  # the words, for the entities' text
        if spans is not None:
            out["text"] = texts
            out["word_spans"] = [[list(span) for _, span in found] for found in spans]
        return out, truncated

    @staticmethod
    def _continuations(labels: tuple[str, ...]) -> list[int]:
        """Each tag's index on a word's later sub-words: B-TYPE's is I-TYPE's."""
        return [labels.index("I-" + tag[2:]) if tag.startswith("B-") else i
                for i, tag in enumerate(labels)]

    def arrow_types(self) -> dict[str, Any]:
        import pyarrow as pa

        return {**super().arrow_types(), "labels": pa.list_(pa.int16()),
                "word_starts": pa.list_(pa.int32())}

    def collate(self, rows: dict[str, list], pad_token_id: int) -> dict[str, torch.Tensor]:
        """Tokens padded as for a sentence; ``labels`` padded with -100; ``label_mask``
        marks the tokens SMART and the metrics read; ``word_starts`` padded with -2."""
        import torch

        batch = pad_tokens(rows, pad_token_id)
        width = batch["input_ids"].shape[1]
        starts = rows["word_starts"]
        words = max(len(s) for s in starts)
        batch["word_starts"] = torch.tensor([s + [PADDED] * (words - len(s)) for s in starts],
                                            dtype=torch.long)
        if "labels" in rows:
            batch["labels"] = torch.tensor(
                [x + [IGNORED] * (width - len(x)) for x in rows["labels"]], dtype=torch.long)
            batch["label_mask"] = batch["labels"] != IGNORED
        else:
            mask = torch.zeros(batch["input_ids"].shape, dtype=torch.bool)
            for row, positions in enumerate(starts):
                seen = [p for p in positions if p >= 0]
                mask[row, seen] = True
            batch["label_mask"] = mask
        return batch

    # ---- model ---------------------------------------------------------------------------
    def head(self, hidden_size: int, task: TaskDef) -> torch.nn.Module:
        from mtdnn.tasks.heads import TokenHead

        return TokenHead(hidden_size, self.width(task), task.dropout)

    def loss(self, logits: Any, labels: Any, label_smoothing: float = 0.0) -> Any:
        import torch.nn.functional as F

        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                               ignore_index=IGNORED, label_smoothing=label_smoothing)

    def divergence(self, name: str, batch: dict[str, Any]) -> Any:
        from mtdnn.tasks.divergences import masked_symmetric_kl

        keep = batch["label_mask"]
        return lambda p, q: masked_symmetric_kl(p, q, keep)

    # ---- prediction ------------------------------------------------------------------------
    def predict(self, logits: Any, batch: dict[str, Any]) -> list[np.ndarray]:
        """Each sentence's tag distribution per word ``[words, tags]``; a word the model did
        not see has all zeros (its tag is then ``O``)."""
        probabilities = logits.float().softmax(dim=-1).cpu().numpy()
        starts = batch["word_starts"].cpu().numpy()
        sentences = []
        for row, positions in enumerate(starts):
            positions = positions[positions != PADDED]
            words = probabilities[row, np.maximum(positions, 0)]
            words[positions == UNSEEN] = 0.0
            sentences.append(words)
        return sentences

    def tags(self, task: TaskDef, sentence: np.ndarray) -> list[str]:
        """A sentence's predicted tags, valid IOB2 (a word the model did not see: O)."""
        unseen = sentence.sum(-1) == 0
        tags = [task.labels[int(i)] for i in sentence.argmax(-1)]
        return repair_iob2(["O" if u else tag for tag, u in zip(tags, unseen, strict=True)])

    def score(self, task: TaskDef, predictions: Any, dataset: Any) -> dict[str, float]:
        """Entity precision, recall and F1 (seqeval, strict IOB2) over the words the model
        saw: each word's gold tag is on its first sub-word."""
        from seqeval.metrics import f1_score, precision_score, recall_score
        from seqeval.scheme import IOB2

        gold, guessed = [], []
        for sentence, labels, starts in zip(predictions, dataset["labels"],
                                            dataset["word_starts"], strict=True):
            seen = [i for i, s in enumerate(starts) if s >= 0]
            tags = self.tags(task, sentence)
            gold.append([task.labels[labels[starts[i]]] for i in seen])
            guessed.append(repair_iob2([tags[i] for i in seen]))
        scores = {"entity_f1": f1_score, "entity_precision": precision_score,
                  "entity_recall": recall_score}
        return {name: float(scores[name](gold, guessed, mode="strict", scheme=IOB2,
                                         zero_division=0))
                for name in task.metrics}

    def hf_recipe(self, task: TaskDef, tokenizer: Any, max_seq_len: int) -> tuple[Any, Any]:
        """Hugging Face's token-classification example (``run_ner``'s
        ``tokenize_and_align_labels``): the word's tag on its first sub-word, -100 on the
        others, ``DataCollatorForTokenClassification``. ``word_starts`` is kept for scoring
        (``Trainer`` drops it from the model's inputs)."""
        from transformers import DataCollatorForTokenClassification

        field = task.inputs[0]

        def tokenize(batch: dict[str, list]) -> Any:
            encoded = tokenizer(batch[field], is_split_into_words=True, truncation=True,
                                max_length=max_seq_len)
            labels, starts = [], []
            for i, tags in enumerate(batch["labels"]):
                previous, row = None, []
                first = [UNSEEN] * len(batch[field][i])
                for position, word in enumerate(encoded.word_ids(i)):
                    row.append(IGNORED if word is None or word == previous else tags[word])
                    if word is not None and word != previous:
                        first[word] = position
                    previous = word
                labels.append(row)
                starts.append(first)
            encoded["labels"], encoded["word_starts"] = labels, starts
            return encoded

        return tokenize, DataCollatorForTokenClassification(tokenizer)

    def hf_predictions(self, task: TaskDef, logits: np.ndarray, dataset: Any) -> Any:
        """Padded ``[n, length, tags]`` logits → each word's tag distribution, read at the
        word's first sub-word as ours are."""
        import torch

        starts = dataset["word_starts"]
        words = max(len(s) for s in starts)
        padded = torch.tensor([s + [PADDED] * (words - len(s)) for s in starts])
        return self.predict(torch.from_numpy(logits), {"word_starts": padded})

    def records(self, task: TaskDef, predictions: Any, dataset: Any) -> list[dict[str, Any]]:
        """Per sentence: its words' tags and its entities (type, first and last word,
        text)."""
        field = task.inputs[0]
        texts = dataset["text"] if "text" in dataset.column_names else None
        out = []
        for i, (uid, words, sentence) in enumerate(zip(dataset["uid"], dataset[field],
                                                       predictions, strict=True)):
            tags = self.tags(task, sentence)
            found = entities(tags, words)
            if texts is not None:  # a text: each entity's characters in it
                spans = dataset[i]["word_spans"]
                for entity in found:
                    entity["start_char"] = spans[entity["start"]][0]
                    entity["end_char"] = spans[entity["end"]][1]
                    entity["text"] = texts[i][entity["start_char"]:entity["end_char"]]
            record = {"uid": uid, "tags": tags, "entities": found}
            if texts is not None:
                record["words"] = words
            out.append(record)
        return out


TASK_TYPE = TokenClassification()
