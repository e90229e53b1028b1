"""Own data without code: CSV/TSV/Parquet files with mapped columns, Hugging Face datasets
(a local folder, offline), integer and ClassLabel labels, inline task definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtdnn.errors import MtdnnError
from mtdnn.sources import DatasetSource, canonical_path
from mtdnn.task_def import load_task_defs

TASKS = load_task_defs()
ROWS = [("A man plays.", "Someone plays.", "entailment"),
        ("A cat sleeps.", "A dog barks.", "not_entailment"),
        ("It rains.", "The street is wet.", "entailment")]


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def expected(labels: list) -> list[dict]:
    return [{"uid": f"row{n}", "sentence1": a, "sentence2": b, "label": label}
            for n, ((a, b, _), label) in enumerate(zip(ROWS, labels, strict=True), start=2)]


def test_csv_and_tsv_with_mapped_columns_and_integer_labels(tmp_path: Path) -> None:
    csv_file = tmp_path / "mine.csv"
    csv_file.write_text("premise,hypothesis,gold\n" + "".join(
        f'"{a}","{b}",{["entailment", "not_entailment"].index(y)}\n' for a, b, y in ROWS))
    columns = {"sentence1": "premise", "sentence2": "hypothesis", "label": "gold"}
    converted = canonical_path(str(csv_file), TASKS["rte"], columns, tmp_path / "cache")
    assert read(converted) == expected([0, 1, 0])  # positions, kept as integers

    from mtdnn.data import read_examples

    assert read_examples(converted, TASKS["rte"], require_labels=True)["labels"] == [0, 1, 0]
    tsv_file = tmp_path / "mine.tsv"
    tsv_file.write_text("sentence1\tsentence2\tlabel\n" +
                        "".join(f"{a}\t{b}\t{y}\n" for a, b, y in ROWS))
    assert read(canonical_path(str(tsv_file), TASKS["rte"], {}, tmp_path / "cache")) == \
        expected([y for *_, y in ROWS])

    with pytest.raises(MtdnnError) as caught:
        canonical_path(str(csv_file), TASKS["rte"], {}, tmp_path / "cache")
    assert f"{csv_file}:2: key 'columns.sentence1': no column 'sentence1'" in str(caught.value)
    assert "premise, hypothesis, gold" in str(caught.value)


def test_parquet_and_a_local_hugging_face_dataset_with_a_class_label(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features({
        "premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
        "label": datasets.ClassLabel(names=["entailment", "not_entailment"])})
    dataset = datasets.Dataset.from_dict(
        {"premise": [a for a, *_ in ROWS], "hypothesis": [b for _, b, _ in ROWS],
         "label": [["entailment", "not_entailment"].index(y) for *_, y in ROWS]},
        features=features)
    folder = tmp_path / "my_dataset"
    folder.mkdir()
    dataset.to_parquet(str(folder / "train.parquet"))
    columns = {"sentence1": "premise", "sentence2": "hypothesis"}
    from_file = read(canonical_path(str(folder / "train.parquet"), TASKS["rte"], columns,
                                    tmp_path / "cache"))
    from_dataset = read(canonical_path(DatasetSource(str(folder), split="train"),
                                       TASKS["rte"], columns, tmp_path / "cache"))
    labels = [0, 1, 0]
    assert [r["label"] for r in from_file] == labels
    assert [r["label"] for r in from_dataset] == labels
    assert [r["sentence1"] for r in from_dataset] == [a for a, *_ in ROWS]

    with pytest.raises(MtdnnError, match="its ClassLabel has 2 names .* task 'mnli' has 3"):
        canonical_path(DatasetSource(str(folder), split="train"), TASKS["mnli"],
                       {"premise": "premise", "hypothesis": "hypothesis"}, tmp_path / "cache")


def test_a_run_on_a_csv_with_an_inline_task_definition(tmp_path: Path,
                                                       tiny_encoder_dir: Path) -> None:
    from mtdnn import train

    data = tmp_path / "reviews.csv"
    data.write_text("text,stars\n" + "".join(
        f"{'great fine good' if i % 2 else 'awful poor bad'} {i},{'pos' if i % 2 else 'neg'}\n"
        for i in range(16)))
    definition = {"type": "classification", "inputs": ["sentence"], "labels": ["neg", "pos"],
                  "metrics": ["accuracy"]}
    summary = train({"tasks": {"reviews": {
        "train": str(data), "dev": str(data), "definition": definition,
        "columns": {"sentence": "text", "label": "stars"}}}},
        encoder=str(tiny_encoder_dir), max_steps=2, batch_size=8, max_seq_len=32,
        output_dir=str(tmp_path / "run"), cache_dir=str(tmp_path / "cache"),
        progress_bar=False)
    assert set(summary["best"]["metrics"]) == {"reviews"}
    saved = (tmp_path / "run" / "best" / "task_defs.yaml").read_text()
    assert "reviews:" in saved and "neg" in saved

    with pytest.raises(MtdnnError, match="task 'rte' is already defined"):
        train({"tasks": {"rte": {"definition": definition}}}, encoder=str(tiny_encoder_dir))
