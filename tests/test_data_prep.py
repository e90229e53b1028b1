from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import run_module

# Row counts from ../shared/data/README.md.
EXPECTED_ROWS = {
    "scitail/train.jsonl": 23_596, "scitail/dev.jsonl": 1_304,
    "snli/train.jsonl": 21_605, "snli/dev.jsonl": 9_842,
    "rte/train.jsonl": 2_490, "rte/dev.jsonl": 277, "rte/test.jsonl": 3_000,
    "mrpc/train.jsonl": 3_668, "mrpc/dev.jsonl": 408, "mrpc/test.jsonl": 1_725,
    "sst2/train.jsonl": 67_349, "sst2/dev.jsonl": 872, "sst2/test.jsonl": 1_821,
    "stsb/train.jsonl": 5_749, "stsb/dev.jsonl": 1_500, "stsb/test.jsonl": 1_379,
    "cola/train.jsonl": 8_551, "cola/dev.jsonl": 1_043, "cola/test.jsonl": 1_063,
    "wnli/train.jsonl": 635, "wnli/dev.jsonl": 71, "wnli/test.jsonl": 146,
    "qnli/dev.jsonl": 5_463, "qnli/test.jsonl": 5_463,
    "mnli/dev_matched.jsonl": 9_815, "mnli/dev_mismatched.jsonl": 9_832,
    "conll2003/train.jsonl": 14_041, "conll2003/dev.jsonl": 3_250,
    "wnut17/train.jsonl": 3_394, "wnut17/dev.jsonl": 1_009, "squad/dev.jsonl": 10_570,
}


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_split_with_exact_row_counts(prepared_data: Path) -> None:
    written = {str(p.relative_to(prepared_data)) for p in prepared_data.glob("*/*.jsonl")}
    assert written == set(EXPECTED_ROWS)
    for name, rows in EXPECTED_ROWS.items():
        assert len(read(prepared_data / name)) == rows, name


def test_manifest_records_rows_labels_and_source_hash(prepared_data: Path,
                                                      shared_data: Path) -> None:
    files = json.loads((prepared_data / "manifest.json").read_text())["files"]
    assert {k: v["rows"] for k, v in files.items()} == EXPECTED_ROWS
    rte = files["rte/train.jsonl"]
    source = Path(rte["source"])
    assert source.resolve() == (shared_data / "glue/RTE/train.tsv").resolve()
    assert rte["source_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert sum(rte["label_distribution"].values()) == 2_490
    assert set(rte["label_distribution"]) == {"entailment", "not_entailment"}
    assert files["rte/test.jsonl"]["labelled"] is False
    assert files["stsb/train.jsonl"]["label_distribution"]["max"] == 5.0


def test_records_are_canonical(prepared_data: Path) -> None:
    mrpc = read(prepared_data / "mrpc/train.jsonl")
    # MRPC starts with a BOM: its first column must still be found by name.
    assert set(mrpc[0]) == {"uid", "sentence1", "sentence2", "label"}
    assert mrpc[0]["label"] in {"0", "1"}
    assert '"the witness"' in mrpc[0]["sentence1"]  # bare quotes kept (QUOTE_NONE)
    stsb = read(prepared_data / "stsb/dev.jsonl")
    assert isinstance(stsb[0]["label"], float)
    cola = read(prepared_data / "cola/train.jsonl")  # headerless file
    assert set(cola[0]) == {"uid", "sentence", "label"}
    assert "label" not in read(prepared_data / "cola/test.jsonl")[0]
    mnli = read(prepared_data / "mnli/dev_matched.jsonl")
    assert set(mnli[0]) == {"uid", "premise", "hypothesis", "label"}
    for name in EXPECTED_ROWS:
        uids = [r["uid"] for r in read(prepared_data / name)]
        assert len(set(uids)) == len(uids), name


def test_uids_are_stable_across_runs(prepared_data: Path, shared_data: Path,
                                     tmp_path: Path) -> None:
    run_module("mtdnn.data_prep", "scitail", "--raw-dir", str(shared_data),
               "--out-dir", str(tmp_path))
    assert (tmp_path / "scitail/dev.jsonl").read_bytes() == \
        (prepared_data / "scitail/dev.jsonl").read_bytes()


def test_absent_splits_are_skipped_with_a_message(shared_data: Path, tmp_path: Path) -> None:
    result = run_module("mtdnn.data_prep", "glue", "--raw-dir", str(shared_data),
                        "--out-dir", str(tmp_path))
    assert "skip mnli train" in result.stdout and "skip qnli train" in result.stdout
    assert (tmp_path / "qnli/dev.jsonl").is_file()


# ---- bad rows: hand-written fixtures -----------------------------------------------------

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
RTE_GOOD = RTE_HEADER + "0\tA man sleeps.\tA person sleeps.\tentailment\n"


def make_raw(tmp_path: Path, files: dict[str, str]) -> Path:
    raw = tmp_path / "raw"
    for name, text in files.items():
        path = raw / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return raw


BAD_ROWS = {
    "wrong column count": ("glue/RTE/train.tsv", RTE_GOOD + "1\tonly two\tentailment\n", 3,
                           "found 3 tab-separated fields, expected 4"),
    "label not in list": ("glue/RTE/train.tsv", RTE_GOOD + "1\tA.\tB.\tmaybe\n", 3,
                          "label 'maybe' is not one of the task's labels (allowed: entailment, "
                          "not_entailment)"),
    "empty text": ("glue/RTE/dev.tsv", RTE_GOOD + "1\t  \tB.\tentailment\n", 3,
                   "field 'sentence1' is missing or empty"),
    "non-numeric score": ("glue/STS-B/train.tsv",
                          "index\tsentence1\tsentence2\tscore\n0\tA.\tB.\t3.5\n1\tA.\tB.\thigh\n",
                          3, "regression score 'high' is not a number"),
    "scitail bad label": ("scitail/tsv_format/scitail_1.0_train.tsv",
                          "P.\tH.\tentails\nP.\tH.\tneutral\nP.\tH.\tcontradiction\n", 3,
                          "label 'contradiction' is not one of the task's labels"),
    "snli missing field": ("snli/snli_1.0_dev.jsonl",
                           '{"gold_label": "neutral", "sentence1": "A.", "sentence2": "B."}\n'
                           '{"gold_label": "neutral", "sentence1": "A."}\n', 2,
                           "missing field 'sentence2'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_row_stops_with_file_and_line_and_leaves_output_untouched(
        tmp_path: Path, shared_data: Path, case: str) -> None:
    name, text, line, words = BAD_ROWS[case]
    raw = make_raw(tmp_path, {"glue/RTE/train.tsv": RTE_GOOD, name: text})
    out = tmp_path / "out"
    # An earlier, good result in the output folder must survive the failed run.
    run_module("mtdnn.data_prep", "scitail", "--raw-dir", str(shared_data), "--out-dir", str(out))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    result = run_module("mtdnn.data_prep", "all", "--raw-dir", str(raw), "--out-dir", str(out),
                        check=False)
    assert result.returncode == 2
    assert f"{raw / name}:{line}:" in result.stderr and words in result.stderr
    assert "Traceback" not in result.stderr
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


def test_columns_are_found_by_header_name(tmp_path: Path) -> None:
    raw = make_raw(tmp_path, {"glue/RTE/train.tsv":
                              "label\tsentence2\tindex\tsentence1\nentailment\tH.\t7\tP.\n"})
    run_module("mtdnn.data_prep", "glue", "--raw-dir", str(raw), "--out-dir", str(tmp_path / "out"))
    assert read(tmp_path / "out/rte/train.jsonl") == [
        {"uid": "rte-train-7", "sentence1": "P.", "sentence2": "H.", "label": "entailment"}]


def test_snli_unlabelled_pairs_are_dropped_and_counted(tmp_path: Path) -> None:
    pair = '{{"gold_label": "{}", "sentence1": "A.", "sentence2": "B."}}\n'
    lines = "".join(pair.format(label) for label in ("neutral", "-", "entailment"))
    raw = make_raw(tmp_path, {"snli/snli_1.0_dev.jsonl": lines})
    run_module("mtdnn.data_prep", "snli", "--raw-dir", str(raw), "--out-dir", str(tmp_path / "out"))
    assert [r["label"] for r in read(tmp_path / "out/snli/dev.jsonl")] == ["neutral", "entailment"]
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    assert manifest["files"]["snli/dev.jsonl"]["dropped"] == {"no_gold_label": 1}


def test_missing_column_is_named(tmp_path: Path) -> None:
    raw = make_raw(tmp_path, {"glue/RTE/train.tsv": "index\tsentence1\tlabel\n0\tP.\tentailment\n"})
    result = run_module("mtdnn.data_prep", "glue", "--raw-dir", str(raw), "--out-dir",
                        str(tmp_path / "out"), check=False)
    assert result.returncode == 2
    assert "train.tsv:1: missing column 'sentence2'" in result.stderr


def test_missing_raw_dir_is_a_clear_error(tmp_path: Path) -> None:
    result = run_module("mtdnn.data_prep", "all", "--raw-dir", str(tmp_path / "nope"), check=False)
    assert result.returncode == 2 and "raw data folder not found" in result.stderr
