from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_module
from mtdnn.data_prep.subsets import nested_indices, sizes_from_percents


def subsets(prepared: Path, out: Path, task: str, *how: str, seed: int = 13) -> dict:
    run_module("mtdnn.data_prep", "subsets", "--data-dir", str(prepared), "--task", task,
               "--seed", str(seed), "--out-dir", str(out), *how)
    return json.loads((out / "manifest.json").read_text())["files"]


def uids(path: Path) -> list[str]:
    return [json.loads(line)["uid"] for line in path.read_text().splitlines()]


def test_paper_sizes_are_floor_of_percent() -> None:
    assert [s.size for s in sizes_from_percents(["0.1", "1", "10", "100"], 23_596)] == \
        [23, 235, 2_359, 23_596]
    assert [s.size for s in sizes_from_percents(["0.1", "1", "10", "100"], 549_367)] == \
        [549, 5_493, 54_936, 549_367]


def test_scitail_paper_subsets_exact_and_nested(prepared_data: Path, tmp_path: Path) -> None:
    files = subsets(prepared_data, tmp_path / "a", "scitail", "--preset", "paper")
    sizes = {name: len(uids(tmp_path / "a" / entry["file"])) for name, entry in files.items()}
    assert sizes == {"0.1pct": 23, "1pct": 235, "10pct": 2_359, "100pct": 23_596}
    order = ["0.1pct", "1pct", "10pct", "100pct"]
    sets = [set(uids(tmp_path / "a" / f"{name}.jsonl")) for name in order]
    for small, large in zip(sets, sets[1:], strict=False):
        assert small < large
    source = prepared_data / "scitail/train.jsonl"
    assert sets[-1] == set(uids(source))
    entry = files["1pct"]
    assert entry["seed"] == 13 and entry["source_rows"] == 23_596
    assert sum(entry["label_distribution"].values()) == 235
    assert len(entry["source_sha256"]) == 64


def test_same_seed_same_subsets_other_seed_different(prepared_data: Path, tmp_path: Path) -> None:
    for out, seed in (("a", 13), ("b", 13), ("c", 14)):
        subsets(prepared_data, tmp_path / out, "rte", "--count", "24", "249", seed=seed)
    for name in ("n24.jsonl", "n249.jsonl"):
        a, b, c = ((tmp_path / out / name).read_bytes() for out in "abc")
        assert a == b and a != c


def test_snli_sizes_beyond_the_file_are_unavailable(prepared_data: Path, tmp_path: Path) -> None:
    files = subsets(prepared_data, tmp_path, "snli", "--preset", "paper")
    assert files["0.1pct"]["available"] and len(uids(tmp_path / "0.1pct.jsonl")) == 549
    assert files["1pct"]["available"] and len(uids(tmp_path / "1pct.jsonl")) == 5_493
    for name in ("10pct", "100pct"):
        assert files[name]["available"] is False
        assert files[name]["reason"] == "train file has 21,605 rows"
        assert not (tmp_path / f"{name}.jsonl").exists()


def test_percent_of_file_by_default(prepared_data: Path, tmp_path: Path) -> None:
    files = subsets(prepared_data, tmp_path, "rte", "--percent", "1", "10")
    assert (files["1pct"]["size"], files["10pct"]["size"]) == (24, 249)


@pytest.mark.parametrize("num_rows,seed", [(100, 0), (7, 3)])
def test_nested_indices_are_prefixes(num_rows: int, seed: int) -> None:
    sizes = [1, 3, 5, num_rows]
    chosen = nested_indices(num_rows, sizes, seed)
    for small, large in zip(sizes, sizes[1:], strict=False):
        assert set(chosen[small]) <= set(chosen[large])
    assert sorted(chosen[num_rows]) == list(range(num_rows))


def test_bad_percent_and_unknown_task(prepared_data: Path, tmp_path: Path) -> None:
    bad = run_module("mtdnn.data_prep", "subsets", "--data-dir", str(prepared_data),
                     "--task", "rte",
                     "--percent", "150", check=False)
    assert bad.returncode == 2 and "percent 150 is out of range" in bad.stderr
    unknown = run_module("mtdnn.data_prep", "subsets", "--data-dir", str(prepared_data),
                         "--task", "qqp", "--preset", "paper", check=False)
    assert unknown.returncode == 2 and "unknown task 'qqp'" in unknown.stderr
    missing = run_module("mtdnn.data_prep", "subsets", "--data-dir", str(tmp_path), "--task", "rte",
                         "--count", "5", check=False)
    assert missing.returncode == 2 and "no prepared train file" in missing.stderr


def test_holdout_is_disjoint_from_the_subsets_of_the_same_permutation(
        prepared_data: Path, tmp_path: Path) -> None:
    """A tuning split from train: the last rows of the permutation, so the 1% and 10%
    subsets that reported results train on (the same rows as --preset paper) never see it."""
    files = subsets(prepared_data, tmp_path / "t", "scitail", "--count", "235", "2359",
                    "--holdout", "1000")
    paper = subsets(prepared_data, tmp_path / "p", "scitail", "--preset", "paper")
    assert uids(tmp_path / "t" / "n235.jsonl") == uids(tmp_path / "p" / paper["1pct"]["file"])
    held = set(uids(tmp_path / "t" / "holdout.jsonl"))
    assert len(held) == files["holdout"]["size"] == 1000
    assert not held & set(uids(tmp_path / "t" / "n2359.jsonl"))
    assert held < set(uids(prepared_data / "scitail/train.jsonl"))
    refused = run_module("mtdnn.data_prep", "subsets", "--data-dir", str(prepared_data), "--task",
                         "rte", "--percent", "90", "--holdout", "498", "--out-dir",
                         str(tmp_path / "r"), check=False)
    assert refused.returncode == 2 and "key '--holdout'" in refused.stderr
    assert not (tmp_path / "r").exists()
