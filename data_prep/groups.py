"""Groups of candidates for ranking, and a train/dev split carved by group.

A ranking task (``type: ranking``) reads one row per candidate with a ``group`` key shared
by the candidates of one query. :func:`draw_group_split` builds the groups of a prepared
file from one of its fields (for QNLI, the question: every row asking the same question is
one group), numbers them in order of first appearance, and deals whole groups to a train
and a dev file with a seeded permutation, so that no query is on both sides. Both files
keep every field, so a classification task reads them as they are: ranking and
classification then train and score on the same rows.

    python -m mtdnn.data_prep groups --data-dir data --task qnli --split dev \\
        --key question --dev-groups 340 --seed 13  # 1,021 + 340 of its 1,361 groups
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from mtdnn.data_prep.canonical import Staging, label_distribution
from mtdnn.errors import MtdnnError
from mtdnn.files import read_jsonl, sha256_of
from mtdnn.tasks.task_def import TaskDef


def group_dir(data_dir: Path, task: str, seed: int) -> Path:
    """Where the group split of ``task`` drawn with ``seed`` lives."""
    return data_dir / task / "groups" / f"seed{seed}"


def draw_group_split(task: TaskDef, source: Path, out_dir: Path, key: str, dev_groups: int,
                     seed: int, positive: str | None = None, log=print,
                     keep_all: bool = False) -> Path:
    """Write ``train.jsonl`` and ``dev.jsonl`` of whole groups of ``source`` (rows sharing
    ``key``) into ``out_dir``, with a manifest recording the seed, the source, the group
    sizes and the groups left out. Only groups a ranking task can learn from are kept:
    exactly one ``positive`` row (default: the task's first label) and at least one other.
    ``dev_groups`` groups go to dev, the rest to train. ``keep_all`` keeps every group (a
    span task's articles, say: there is no positive to look for)."""
    positive = None if keep_all else positive or task.labels[0]
    if positive is not None and positive not in task.labels:
        raise MtdnnError(f"'{positive}' is not a label of task '{task.name}'", key="--positive",
                         allowed=", ".join(task.labels))
    rows = [(line, obj) for line, obj in read_jsonl(source)]
    groups: dict[Any, str] = {}
    members: dict[str, list[dict[str, Any]]] = {}
    for line, obj in rows:
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip():
            raise MtdnnError(f"field '{key}' is missing or empty", file=source, line=line,
                             key="--key", allowed="a field every row has: the query that "
                                                  "groups its candidates")
        group = groups.setdefault(value, f"{task.name}-g{len(groups)}")
        members.setdefault(group, []).append({**obj, "group": group})
    dropped = _leave_out_unrankable(members, positive) if positive is not None else Counter()
    for reason, count in sorted(dropped.items()):
        log(f"{task.name}: left out {count:,} {reason}")
    names = list(members)
    if not 0 < dev_groups < len(names):
        raise MtdnnError(f"--dev-groups {dev_groups} of {len(names):,} groups", key="--dev-groups",
                         allowed=f"1 to {len(names) - 1:,}")
    order = np.random.default_rng(seed).permutation(len(names))
    dev = set(order[:dev_groups].tolist())
    sides = {"train": [names[i] for i in range(len(names)) if i not in dev],
             "dev": [names[i] for i in range(len(names)) if i in dev]}
    common = {"task": task.name, "seed": seed, "key": key, "positive": positive,
              "source": str(source), "source_rows": len(rows),
              "source_sha256": sha256_of(source), "left_out": dict(sorted(dropped.items()))}
    entries = {}
    with Staging(out_dir) as staging:
        for side, chosen in sides.items():
            records = [record for group in chosen for record in members[group]]
            staging.path(f"{side}.jsonl").write_text(
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                encoding="utf-8")
            sizes = Counter(len(members[group]) for group in chosen)
            entries[side] = {**common, "name": side, "file": f"{side}.jsonl",
                             "groups": len(chosen), "rows": len(records),
                             "candidates_per_group": {str(k): v for k, v in sorted(sizes.items())},
                             "label_distribution": label_distribution(
                                 [r.get("label") for r in records if "label" in r], task)}
            log(f"{task.name} {side}: {len(chosen):,} groups, {len(records):,} rows")
        return staging.publish(entries)


def _leave_out_unrankable(members: dict[str, list[dict[str, Any]]], positive: str) -> Counter:
    """Drop the groups a ranking task cannot learn from (not exactly one ``positive``, or a
    single candidate); the count of each reason."""
    dropped: Counter = Counter()
    for group, records in list(members.items()):
        found = sum(r.get("label") == positive for r in records)
        reason = ("a single candidate" if len(records) < 2 else
                  f"no '{positive}'" if found == 0 else
                  f"{found} rows '{positive}'" if found > 1 else None)
        if reason:
            dropped[f"groups with {reason}"] += 1
            del members[group]
    return dropped
