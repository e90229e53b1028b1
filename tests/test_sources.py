"""Own data without code: CSV/TSV/Parquet files with mapped columns, Hugging Face datasets
(a local folder, offline), integer and ClassLabel labels, inline task definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtdnn.config.train_config import DatasetSource
from mtdnn.data.sources import canonical_path
from mtdnn.errors import MtdnnError
from mtdnn.tasks.task_def import load_task_defs

TASKS = load_task_defs()
ROWS = [("A man plays.", "Someone plays.", "entailment"),
        ("A cat sleeps.", "A dog barks.", "not_entailment"),
        ("It rains.", "The street is wet.", "entailment")]


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n") if line]


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

    from mtdnn.data.tokenized import read_examples

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
    labels = [y for *_, y in ROWS]  # ClassLabel positions read by name
    assert [r["label"] for r in from_file] == labels
    assert [r["label"] for r in from_dataset] == labels
    assert [r["sentence1"] for r in from_dataset] == [a for a, *_ in ROWS]

    with pytest.raises(MtdnnError, match=r"label names \['entailment', 'not_entailment'\] "
                                         r"are not task 'mnli''s labels"):
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
    # the data lines name the user's CSV, not its converted copy in the cache
    log = (tmp_path / "run" / "train.log").read_text()
    assert f"reviews: {data}, 16 examples" in log and "cache/sources" not in log

    with pytest.raises(MtdnnError, match="task 'rte' is already defined"):
        train({"tasks": {"rte": {"definition": definition}}}, encoder=str(tiny_encoder_dir))


# -- valid files read as they are (issue 48) ------------------------------------------------

def rows_of(path: Path, columns: dict | None = None, task: str = "rte") -> list[dict]:
    return read(canonical_path(str(path), TASKS[task], columns or {}, path.parent / "cache"))


def test_excel_csv_with_a_byte_order_mark_reads_clean_column_names(tmp_path: Path) -> None:
    data = tmp_path / "excel.csv"
    data.write_bytes("\ufeffsentence1,sentence2,label\r\nA man plays.,Someone plays.,"
                     "entailment\r\nIt rains.,It is dry.,not_entailment\r\n".encode())
    assert rows_of(data) == [
        {"uid": "row2", "sentence1": "A man plays.", "sentence2": "Someone plays.",
         "label": "entailment"},
        {"uid": "row3", "sentence1": "It rains.", "sentence2": "It is dry.",
         "label": "not_entailment"}]


def test_a_quoted_newline_stays_in_its_field_and_rows_keep_their_lines(tmp_path: Path) -> None:
    data = tmp_path / "multi.csv"
    data.write_text('sentence1,sentence2,label\n"First line\nsecond line","A, b",entailment\n'
                    'Next.,"He said ""hi"".",not_entailment\n')
    rows = rows_of(data)
    assert [r["sentence1"] for r in rows] == ["First line\nsecond line", "Next."]
    assert [r["sentence2"] for r in rows] == ["A, b", 'He said "hi".']
    assert [r["uid"] for r in rows] == ["row2", "row4"]  # the line each row starts on


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_unicode_line_separators_inside_a_text_do_not_split_rows(tmp_path: Path,
                                                                 suffix: str) -> None:
    sep = "," if suffix == ".csv" else "\t"
    texts = ["one\u2028two", "three\u2029four", "five\x85six", "seven\x0beight"]
    data = tmp_path / f"seps{suffix}"
    data.write_text(f"sentence1{sep}sentence2{sep}label\n" + "".join(
        f"{t}{sep}H {i}.{sep}entailment\n" for i, t in enumerate(texts)))
    rows = rows_of(data)
    assert [r["sentence1"] for r in rows] == texts
    assert [r["sentence2"] for r in rows] == [f"H {i}." for i in range(4)]


def test_a_glue_tsv_with_an_unbalanced_quote_keeps_every_row(tmp_path: Path) -> None:
    """GLUE's files are unquoted: a quote in a text is data, and rows never merge."""
    texts = [f'Row {i} says "hello.' if i == 2 else f"Row {i} plain." for i in range(8)]
    data = tmp_path / "train.tsv"
    data.write_text("index\tsentence1\tsentence2\tlabel\n" + "".join(
        f"{i}\t{t}\tH{i}.\t{'entailment' if i % 2 else 'not_entailment'}\n"
        for i, t in enumerate(texts)))
    rows = rows_of(data)
    assert len(rows) == 8
    for i, row in enumerate(rows):
        assert row == {"uid": f"row{i + 2}", "sentence1": texts[i], "sentence2": f"H{i}.",
                       "label": "entailment" if i % 2 else "not_entailment"}


def class_label_dataset(names: list[str], labels: list[str]):
    import datasets

    features = datasets.Features({
        "premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
        "label": datasets.ClassLabel(names=names)})
    return datasets.Dataset.from_dict(
        {"premise": [a for a, *_ in ROWS], "hypothesis": [b for _, b, _ in ROWS],
         "label": [names.index(y) for y in labels]}, features=features)


def test_class_labels_in_another_order_are_mapped_by_name(tmp_path: Path) -> None:
    """[not_entailment, entailment] for a task labelled [entailment, not_entailment]: every
    label keeps its meaning (mapping positions would flip them all)."""
    truth = [y for *_, y in ROWS]
    dataset = class_label_dataset(["not_entailment", "entailment"], truth)
    folder = tmp_path / "flipped"
    folder.mkdir()
    dataset.to_parquet(str(folder / "train.parquet"))
    columns = {"sentence1": "premise", "sentence2": "hypothesis"}
    from_dataset = read(canonical_path(DatasetSource(str(folder), split="train"),
                                       TASKS["rte"], columns, tmp_path / "cache"))
    from_parquet = read(canonical_path(str(folder / "train.parquet"), TASKS["rte"], columns,
                                       tmp_path / "cache"))
    assert [r["label"] for r in from_dataset] == truth
    assert [r["label"] for r in from_parquet] == truth

    from mtdnn.data.tokenized import read_examples

    converted = canonical_path(DatasetSource(str(folder), split="train"), TASKS["rte"],
                               columns, tmp_path / "cache")
    labels = read_examples(converted, TASKS["rte"], require_labels=True)["labels"]
    assert labels == [TASKS["rte"].labels.index(y) for y in truth]


def test_whole_float_labels_mean_the_same_in_csv_and_parquet(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame({"sentence1": [a for a, *_ in ROWS],
                          "sentence2": [b for _, b, _ in ROWS], "label": [0.0, 1.0, 0.0]})
    frame.to_parquet(tmp_path / "floats.parquet")
    frame.to_csv(tmp_path / "floats.csv", index=False)
    from_parquet = rows_of(tmp_path / "floats.parquet")
    from_csv = rows_of(tmp_path / "floats.csv")
    assert [r["label"] for r in from_parquet] == [0, 1, 0]
    assert [r["label"] for r in from_csv] == [0, 1, 0]
    assert [r["sentence1"] for r in from_csv] == [r["sentence1"] for r in from_parquet]


def test_errors_name_the_users_file_and_row_not_the_cache(tmp_path: Path) -> None:
    data = tmp_path / "mine.csv"
    data.write_text("sentence1,sentence2,label\nA.,B.,entailment\nC.,,entailment\n")
    with pytest.raises(MtdnnError) as caught:
        rows_of(data)
    assert str(caught.value).startswith(f"{data}:3: task 'rte': field 'sentence2' is missing")
    import pandas as pd

    pd.DataFrame({"sentence1": ["A.", "B."], "sentence2": ["C.", "D."],
                  "label": ["entailment", "maybe"]}).to_parquet(tmp_path / "mine.parquet")
    with pytest.raises(MtdnnError) as caught:
        rows_of(tmp_path / "mine.parquet")
    assert str(caught.value).startswith(f"{tmp_path / 'mine.parquet'}: row 2: task 'rte': "
                                        "label 'maybe'")
    assert ".cache" not in str(caught.value) and "sources" not in str(caught.value)


def test_the_same_bytes_at_a_second_path_are_named_by_that_path(tmp_path: Path) -> None:
    """A converted copy is cached by content; what its errors call it is still the file
    this run was given, not the first path that held the same bytes."""
    from mtdnn.data.sources import shown_name

    cache = tmp_path / "cache"
    text = "sentence1,sentence2,label\nA.,B.,entailment\n"
    first, second = tmp_path / "a" / "mine.csv", tmp_path / "b" / "mine.csv"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(text)
    copies = [canonical_path(str(path), TASKS["rte"], {}, cache) for path in (first, second)]
    assert [shown_name(copy) for copy in copies] == [str(first), str(second)]
    assert read(copies[0]) == read(copies[1])


def test_a_dataset_is_cached_under_mtdnn_cache_when_it_is_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    folder = tmp_path / "my_dataset"
    folder.mkdir()
    datasets.Dataset.from_dict({"premise": ["A."], "hypothesis": ["B."], "label": [
        "entailment"]}).to_parquet(str(folder / "train.parquet"))
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.setenv("MTDNN_CACHE", str(tmp_path / "mine"))
    canonical_path(DatasetSource(str(folder), split="train"), TASKS["rte"],
                   {"sentence1": "premise", "sentence2": "hypothesis"}, tmp_path / "cache")
    assert any((tmp_path / "mine" / "datasets").iterdir())  # datasets' own cache, in ours
