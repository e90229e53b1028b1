from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mtdnn.data import tokenized as data_module
from mtdnn.data.tokenized import Collator, get_batch, load_split, read_examples
from mtdnn.errors import MtdnnError
from mtdnn.tasks.task_def import load_task_defs

TASKS = load_task_defs()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_read_examples_encodes_labels(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rte.jsonl", [
        {"uid": "a", "sentence1": "P.", "sentence2": "H.", "label": "not_entailment"},
        {"uid": "b", "sentence1": "P.", "sentence2": "H.", "label": "entailment"}])
    columns = read_examples(path, TASKS["rte"], require_labels=True)
    assert columns["labels"] == [1, 0] and columns["uid"] == ["a", "b"]
    stsb = write_jsonl(tmp_path / "stsb.jsonl", [{"sentence1": "A", "sentence2": "B",
                                                  "label": 3.5}])
    assert read_examples(stsb, TASKS["stsb"], require_labels=True)["labels"] == [3.5]


def test_integer_labels_are_positions_in_the_task_labels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What every export of a Hugging Face dataset holds: ``{"label": 0}``."""
    path = write_jsonl(tmp_path / "rte.jsonl", [
        {"uid": "a", "sentence1": "P.", "sentence2": "H.", "label": 1},
        {"uid": "b", "sentence1": "P.", "sentence2": "H.", "label": 0}])
    fast = read_examples(path, TASKS["rte"], require_labels=True)
    assert fast["labels"] == [1, 0]
    monkeypatch.setattr(data_module, "_read_columns_fast", lambda *args: None)
    assert read_examples(path, TASKS["rte"], require_labels=True) == fast
    outside = write_jsonl(tmp_path / "bad.jsonl", [
        {"sentence1": "P.", "sentence2": "H.", "label": 0},
        {"sentence1": "P.", "sentence2": "H.", "label": 2}])
    with pytest.raises(MtdnnError) as caught:
        read_examples(outside, TASKS["rte"], require_labels=True)
    assert f"{outside}:2: task 'rte': label 2 is not one of the task's labels (allowed: " \
           "entailment, not_entailment, or their positions 0, 1)" in str(caught.value)


@pytest.mark.parametrize("row,words", [
    ({"sentence1": "P."}, "field 'sentence2' is missing or empty"),
    ({"sentence1": "P.", "sentence2": "H.", "label": "maybe"}, "label 'maybe' is not one of"),
    ({"sentence1": "P.", "sentence2": "H."}, "example has no label"),
])
def test_bad_examples_name_file_and_line(tmp_path: Path, row: dict, words: str) -> None:
    good = {"sentence1": "P.", "sentence2": "H.", "label": "entailment"}
    path = write_jsonl(tmp_path / "x.jsonl", [good, row])
    with pytest.raises(MtdnnError) as caught:
        read_examples(path, TASKS["rte"], require_labels=True)
    assert f"{path}:2:" in str(caught.value) and words in str(caught.value)


@pytest.mark.parametrize("task,split,labels", [("rte", "dev", True), ("stsb", "dev", True),
                                               ("rte", "test", False), ("sst2", "dev", True)])
def test_arrow_reader_matches_the_line_reader(prepared_data: Path, task: str, split: str,
                                              labels: bool, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    path = prepared_data / task / f"{split}.jsonl"
    fast = data_module._read_columns_fast(path, TASKS[task], labels)
    assert fast is not None and len(fast["uid"]) > 100
    monkeypatch.setattr(data_module, "_read_columns_fast", lambda *args: None)
    assert read_examples(path, TASKS[task], labels) == fast


@pytest.mark.parametrize("odd", [{"uid": 7}, {"sentence1": "   "}, {"label": 1},
                                 {"label": None}, {"extra": [1, 2]}])
def test_arrow_reader_leaves_odd_files_to_the_line_reader(tmp_path: Path, odd: dict) -> None:
    good = {"uid": "a", "sentence1": "P.", "sentence2": "H.", "label": "entailment"}
    path = write_jsonl(tmp_path / "x.jsonl", [good, {**good, "uid": "b", **odd}])
    fast = data_module._read_columns_fast(path, TASKS["rte"], require_labels=True)
    if "extra" in odd:  # extra keys are fine
        assert fast == {"uid": ["a", "b"], "sentence1": ["P.", "P."],
                        "sentence2": ["H.", "H."], "labels": [0, 0]}
    else:
        assert fast is None


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(MtdnnError, match="the file has no examples"):
        read_examples(path, TASKS["rte"], require_labels=True)


def test_tokenized_once_then_cached(prepared_data: Path, tmp_path: Path, tiny_tokenizer,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = prepared_data / "rte/dev.jsonl"
    first = load_split(path, TASKS["rte"], tiny_tokenizer, 64, tmp_path)
    assert not first.from_cache and len(first) == 277

    def fail(*args, **kwargs):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(data_module, "_tokenize", fail)
    tiny_tokenizer("warm up", truncation=True, max_length=17)  # changes backend settings
    second = load_split(path, TASKS["rte"], tiny_tokenizer, 64, tmp_path)
    assert second.from_cache and second.num_truncated == first.num_truncated
    assert second.dataset["input_ids"] == first.dataset["input_ids"]


def test_truncation_is_counted_and_applied(prepared_data: Path, tmp_path: Path,
                                           tiny_tokenizer) -> None:
    path = prepared_data / "rte/dev.jsonl"
    split = load_split(path, TASKS["rte"], tiny_tokenizer, 64, tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    full = tiny_tokenizer([r["sentence1"] for r in rows], [r["sentence2"] for r in rows])
    assert split.num_truncated == sum(len(ids) > 64 for ids in full["input_ids"]) > 0
    assert max(len(ids) for ids in split.dataset["input_ids"]) == 64


def test_collator_pads_to_longest_in_batch(prepared_data: Path, tmp_path: Path,
                                           tiny_tokenizer) -> None:
    split = load_split(prepared_data / "rte/dev.jsonl", TASKS["rte"], tiny_tokenizer, 128,
                       tmp_path)
    indices = np.array([0, 5, 9])
    batch = get_batch(split, indices, Collator(tiny_tokenizer.pad_token_id, TASKS["rte"].task_type))
    lengths = [len(split.dataset[int(i)]["input_ids"]) for i in indices]
    assert batch["input_ids"].shape == (3, max(lengths))
    assert batch["attention_mask"].sum(1).tolist() == lengths
    assert batch["labels"].dtype == torch.long
