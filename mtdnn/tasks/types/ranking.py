"""Pairwise ranking (MT-DNN's formulation of QNLI; Liu et al. 2019, Section 3): candidates
are grouped by a key (for QNLI, the question); each (query, candidate) pair gets one
score, a softmax runs over each group's candidates, and the loss is the negative
log-likelihood of the group's positive.

- **Rows.** One canonical row per candidate, as classification reads it (the two text
  fields and a ``label``), plus ``group``: the key its group shares. The task's labels
  are two names, **the first is the positive** (the one that should rank first); every
  group has exactly one positive.
- **Batches** hold groups: a batch of ``batch_size`` groups runs its candidates through the
  encoder as rows; groups with fewer candidates than the batch's largest are padded with
  masked copies.
- **SMART:** the symmetric KL between the clean and perturbed softmaxes over each group's
  candidates.
- **Prediction:** each candidate's score, its rank in its group and the group's top
  candidate as the positive. An unlabelled example without a ``group`` (``Predictor`` on
  single pairs) is a group of its own: compare the scores.
- **Metrics:** ``accuracy``, MT-DNN's per-candidate accuracy (the top candidate of each
  group called positive, the others negative), and ``top1``, the share of groups whose
  positive ranks first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mtdnn.tasks.task_type import (
    TOKENIZE_CHUNK,
    RaggedTaskType,
    RowError,
    encode_texts,
    pad_tokens,
)
from mtdnn.tasks.types.classification import ClassLabels

if TYPE_CHECKING:
    import torch

    from mtdnn.tasks.task_type import Origin, TaskDef

GROUP = "group"


class CandidateLabels(ClassLabels):
    """A candidate's label is one of two names, the first the positive; the head has one
    score per candidate."""

    @staticmethod
    def width(labels: tuple[str, ...]) -> int:
        return 1

    @staticmethod
    def check(labels: tuple[str, ...]) -> tuple[str, str] | None:
        if len(labels) != 2 or labels[0] == labels[1]:
            return (f"a ranking task needs two labels, found {list(labels)}",
                    "[positive, negative]: the first is the label of the candidate that "
                    "should rank first")
        return None

    @staticmethod
    def hf_config(labels: tuple[str, ...]) -> dict[str, Any]:
        return {"id2label": {0: "score"}, "label2id": {"score": 0}, "problem_type": "regression"}


class Ranking(RaggedTaskType):
    name = "ranking"
    labels = CandidateLabels
    metrics = ("accuracy", "top1")
    default_metrics = ("accuracy", "top1")
    divergences = ("symmetric_kl",)
    default_divergence = "symmetric_kl"
    layout = "groups"
    extra_fields = (GROUP,)

    def check_inputs(self, inputs: tuple[str, ...]) -> tuple[str, str] | None:
        if len(inputs) != 2:
            return (f"found {len(inputs)} input fields",
                    "two text fields: the query and the candidate (e.g. [question, sentence])")
        return None

    def check_fields(self, task: TaskDef, example: dict[str, Any], origin: Origin) -> None:
        super().check_fields(task, example, origin)
        group = example.get(GROUP)
        if not isinstance(group, (str, int)) or isinstance(group, bool) or group == "":
            raise origin.error(f"task '{task.name}': the row has no '{GROUP}' key",
                               allowed=f"a '{GROUP}' (text or number) shared by the "
                                       "candidates of one query on every row")

    def check_columns(self, task: TaskDef, columns: dict[str, list]) -> None:
        """Every group has exactly one positive (in a labelled split)."""
        if "labels" not in columns:
            return
        first: dict[Any, int] = {}
        positives: dict[Any, int] = {}
        for index, (group, label) in enumerate(zip(columns[GROUP], columns["labels"],
                                                   strict=True)):
            first.setdefault(group, index)
            if label == 0:
                if group in positives:
                    raise RowError(f"group {group!r} has a second positive "
                                   f"('{task.labels[0]}') here", "exactly one positive per "
                                   "group", index)
                positives[group] = index
        lacking = [group for group in first if group not in positives]
        if lacking:
            raise RowError(f"group {lacking[0]!r} has no positive ('{task.labels[0]}'); this "
                           "is its first row", "exactly one positive per group",
                           first[lacking[0]])

    # ---- featurization ------------------------------------------------------------------
    def featurize(self, task: TaskDef, columns: dict[str, list], tokenizer: Any,
                  max_seq_len: int) -> tuple[dict[str, list], int]:
        """One row per group, in order of first appearance: each candidate's token ids,
        its uid, and (labelled) the position of the positive among them."""
        ids, types, truncated = [], [], 0
        for start in range(0, len(columns["uid"]), TOKENIZE_CHUNK):
            texts = [columns[name][start:start + TOKENIZE_CHUNK] for name in task.inputs]
            chunk_ids, chunk_types, cut = encode_texts(tokenizer, texts, max_seq_len)
            ids.extend(chunk_ids)
            types.extend(chunk_types)
            truncated += cut
        members: dict[Any, list[int]] = {}
        # without groups (single pairs given to Predictor), each example is its own group
        for index, group in enumerate(columns.get(GROUP) or columns["uid"]):
            members.setdefault(group, []).append(index)
        out: dict[str, list] = {"uid": [], "candidate_uids": [], "input_ids": [],
                                **({"token_type_ids": []} if types else {})}
        if "labels" in columns:
            out["labels"] = []
        for group, rows in members.items():
            out["uid"].append(str(group))
            out["candidate_uids"].append([columns["uid"][i] for i in rows])
            out["input_ids"].append([ids[i] for i in rows])
            if types:
                out["token_type_ids"].append([types[i] for i in rows])
            if "labels" in columns:
                out["labels"].append(next(k for k, i in enumerate(rows)
                                          if columns["labels"][i] == 0))
        return out, truncated

    def arrow_types(self) -> dict[str, Any]:
        import pyarrow as pa

        return {"input_ids": pa.list_(pa.list_(pa.int32())),
                "token_type_ids": pa.list_(pa.list_(pa.int8()))}

    def lengths(self, dataset: Any) -> np.ndarray:
        return np.array([sum(len(ids) for ids in group) for group in dataset["input_ids"]])

    def collate(self, rows: dict[str, list], pad_token_id: int) -> dict[str, torch.Tensor]:
        """The groups' candidates as rows (a smaller group padded with copies of its first
        candidate), ``candidate_mask`` ``[groups, candidates]`` marking the real ones."""
        import torch

        groups = rows["input_ids"]
        width = max(len(group) for group in groups)
        flat: dict[str, list] = {key: [] for key in ("input_ids", "token_type_ids")
                                 if key in rows}
        for key in flat:
            for group in rows[key]:
                flat[key].extend(group + [group[0]] * (width - len(group)))
        batch = pad_tokens(flat, pad_token_id)
        batch["candidate_mask"] = torch.tensor(
            [[k < len(group) for k in range(width)] for group in groups], dtype=torch.bool)
        if "labels" in rows:
            batch["labels"] = torch.tensor(rows["labels"], dtype=torch.long)
        return batch

    # ---- model -----------------------------------------------------------------------------
    def head(self, hidden_size: int, task: TaskDef) -> torch.nn.Module:
        from mtdnn.tasks.heads import GroupScoreHead

        return GroupScoreHead(hidden_size, task.dropout)

    def loss(self, scores: Any, labels: Any, label_smoothing: float = 0.0) -> Any:
        """The negative log-likelihood of each group's positive under the softmax over its
        candidates (a padded candidate's score is -1e4: no probability)."""
        import torch.nn.functional as F

        return F.cross_entropy(scores.float(), labels, label_smoothing=label_smoothing)

    # ---- prediction ---------------------------------------------------------------------
    def predict(self, scores: Any, batch: dict[str, Any]) -> list[np.ndarray]:
        """Each group's candidates' scores (the logits of its softmax)."""
        counts = batch["candidate_mask"].sum(-1).cpu().numpy()
        scores = scores.float().cpu().numpy()
        return [row[:count] for row, count in zip(scores, counts, strict=True)]

    def score(self, task: TaskDef, predictions: Any, dataset: Any) -> dict[str, float]:
        positives = np.asarray(dataset["labels"])
        top = np.array([int(np.argmax(scores)) for scores in predictions])
        sizes = np.array([len(scores) for scores in predictions])
        hit = top == positives
        # a miss mislabels two candidates (the top one and the positive), a hit none
        correct = np.where(hit, sizes, sizes - 2).sum()
        values = {"accuracy": float(correct / sizes.sum()), "top1": float(hit.mean())}
        return {name: values[name] for name in task.metrics}

    def hf_recipe(self, task: TaskDef, tokenizer: Any, max_seq_len: int) -> tuple[Any, Any]:
        from mtdnn.errors import MtdnnError

        raise MtdnnError(f"task '{task.name}' is a ranking task; Hugging Face's examples have "
                         "no ranking recipe to compare with", key="backend",
                         allowed="backend: mtdnn for a ranking task")

    def records(self, task: TaskDef, predictions: Any, dataset: Any) -> list[dict[str, Any]]:
        """One object per candidate, in the groups' order: its group, score, probability
        and rank in the group, and the label its rank gives it."""
        out = []
        for group, uids, scores in zip(dataset["uid"], dataset["candidate_uids"], predictions,
                                       strict=True):
            shifted = np.exp(scores - scores.max())
            probabilities = shifted / shifted.sum()
            ranks = np.empty(len(scores), dtype=int)
            ranks[np.argsort(-scores, kind="stable")] = np.arange(1, len(scores) + 1)
            for uid, score, probability, rank in zip(uids, scores, probabilities, ranks,
                                                     strict=True):
                out.append({"uid": uid, "group": group, "score": round(float(score), 6),
                            "probability": round(float(probability), 6), "rank": int(rank),
                            "prediction": task.labels[0 if rank == 1 else 1]})
        return out


TASK_TYPE = Ranking()
