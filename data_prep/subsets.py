"""Seeded, nested domain-adaptation subsets of a task's canonical train file.

One random permutation of the rows (``numpy.random.default_rng(seed)``) is drawn; the
subset of size k is its first k rows, written in the source file's order. So every
smaller subset is contained in every larger one (0.1% ⊂ 1% ⊂ 10% ⊂ 100%), and the same
seed always gives the same subsets.

A size larger than the file at hand is reported as unavailable, never silently shrunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from mtdnn.data_prep.canonical import Staging, label_distribution
from mtdnn.errors import MtdnnError
from mtdnn.files import read_jsonl, read_text, sha256_of
from mtdnn.tasks.task_def import TaskDef

# Percent of the full official train split, as in the SMART paper's Table 5.
PAPER_PERCENTS = ("0.1", "1", "10", "100")
PAPER_REFERENCE_SIZES = {"scitail": 23_596, "snli": 549_367}


@dataclass(frozen=True)
class SubsetSize:
    """A requested subset: its file stem, row count and how it was asked for."""

    name: str
    size: int
    percent: str | None = None
    reference_size: int | None = None


def sizes_from_percents(percents: list[str], reference_size: int) -> list[SubsetSize]:
    """``floor(percent / 100 * reference_size)`` rows per percent (0.1% of 23,596 = 23)."""
    sizes = []
    for text in percents:
        try:
            percent = Decimal(text)
        except InvalidOperation:
            raise MtdnnError(f"percent {text!r} is not a number", key="--percent",
                             allowed="numbers in (0, 100]") from None
        if not percent.is_finite() or not 0 < percent <= 100:
            raise MtdnnError(f"percent {text} is out of range", key="--percent",
                             allowed="numbers in (0, 100]")
        size = int((percent * reference_size / 100).to_integral_value(rounding=ROUND_FLOOR))
        if size == 0:
            raise MtdnnError(f"{text}% of {reference_size:,} rows is 0 rows", key="--percent",
                             allowed=f"at least {Decimal(100) / reference_size:.3g}% of "
                                     f"{reference_size:,} rows, or --count")
        sizes.append(SubsetSize(f"{percent.normalize():f}pct", size, f"{percent.normalize():f}",
                                reference_size))
    return sizes


def sizes_from_counts(counts: list[int]) -> list[SubsetSize]:
    """Absolute subset sizes."""
    for count in counts:
        if count <= 0:
            raise MtdnnError(f"count {count} is not positive", key="--count",
                             allowed="whole numbers >= 1")
    return [SubsetSize(f"n{count}", count) for count in counts]


def paper_sizes(task: str) -> list[SubsetSize]:
    """The SMART paper's 0.1% / 1% / 10% / 100% sizes of the full official train split."""
    if task not in PAPER_REFERENCE_SIZES:
        raise MtdnnError(f"no paper preset for task '{task}'", key="--preset",
                         allowed=f"tasks {', '.join(PAPER_REFERENCE_SIZES)}")
    return sizes_from_percents(list(PAPER_PERCENTS), PAPER_REFERENCE_SIZES[task])


def subset_dir(data_dir: Path, task: str, seed: int) -> Path:
    """Where the subsets of ``task`` drawn with ``seed`` live."""
    return data_dir / task / "subsets" / f"seed{seed}"


def nested_indices(num_rows: int, sizes: list[int], seed: int) -> dict[int, np.ndarray]:
    """Row indices (sorted) of each size; each smaller set is a prefix of one permutation."""
    order = np.random.default_rng(seed).permutation(num_rows)
    return {size: np.sort(order[:size]) for size in sizes if size <= num_rows}


def draw_subsets(task: TaskDef, source: Path, out_dir: Path, sizes: list[SubsetSize],
                 seed: int, log=print, holdout: int = 0) -> Path:
    """Write the available subsets of ``source`` into ``out_dir`` with a manifest.

    ``holdout`` > 0 also writes ``holdout.jsonl``: the *last* ``holdout`` rows of the same
    permutation, so it shares no row with any subset of up to ``rows - holdout`` rows; a
    tuning split drawn from train that the reported subsets never see."""
    if not source.is_file():
        raise MtdnnError(f"no prepared train file for task '{task.name}'", file=source,
                         allowed="run `python -m mtdnn.data_prep <dataset>` first")
    lines = read_text(source).splitlines(keepends=True)
    records = [obj for _, obj in read_jsonl(source)]
    if len(records) != len(lines):
        raise MtdnnError("blank lines in a canonical file", file=source)
    largest = max((s.size for s in sizes if s.size <= len(lines)), default=0)
    if holdout and largest > len(lines) - holdout:
        raise MtdnnError(f"a holdout of {holdout:,} rows would overlap the {largest:,}-row "
                         f"subset (the file has {len(lines):,} rows)", key="--holdout",
                         allowed=f"at most {len(lines) - largest:,} rows")
    indices = nested_indices(len(lines), [s.size for s in sizes], seed)
    common = {"task": task.name, "seed": seed, "source": str(source),
              "source_rows": len(lines), "source_sha256": sha256_of(source)}
    entries = {}
    with Staging(out_dir) as staging:
        for subset in sizes:
            entry = {**common, "name": subset.name, "size": subset.size,
                     "percent": subset.percent, "reference_size": subset.reference_size}
            if subset.size not in indices:
                reason = f"train file has {len(lines):,} rows"
                log(f"{task.name} {subset.name} ({subset.size:,} rows): unavailable, {reason}")
                entries[subset.name] = {**entry, "available": False, "file": None,
                                        "reason": reason}
                continue
            chosen = indices[subset.size]
            staging.path(f"{subset.name}.jsonl").write_text(
                "".join(lines[i] for i in chosen), encoding="utf-8")
            entries[subset.name] = {
                **entry, "available": True, "file": f"{subset.name}.jsonl",
                "label_distribution": label_distribution(
                    [records[i].get("label") for i in chosen], task)}
            log(f"{task.name} {subset.name}: {subset.size:,} rows")
        if holdout:
            order = np.random.default_rng(seed).permutation(len(lines))
            chosen = np.sort(order[len(lines) - holdout:])
            staging.path("holdout.jsonl").write_text("".join(lines[i] for i in chosen),
                                                     encoding="utf-8")
            entries["holdout"] = {
                **common, "name": "holdout", "size": holdout, "available": True,
                "file": "holdout.jsonl", "note": "the last rows of the permutation: in no "
                f"subset of up to {len(lines) - holdout:,} rows",
                "label_distribution": label_distribution(
                    [records[i].get("label") for i in chosen], task)}
            log(f"{task.name} holdout: {holdout:,} rows")
        return staging.publish(entries)
