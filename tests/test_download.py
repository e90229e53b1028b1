"""The download path, exercised offline on file:// URLs of hand-made archives."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from conftest import run_module
from mtdnn.data_prep import download as dl


def make_zip(path: Path, files: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path.as_uri()


def test_download_writes_the_layout_data_prep_reads(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "server"
    src.mkdir()
    rte = "index\tsentence1\tsentence2\tlabel\n0\tP.\tH.\tentailment\n"
    snli = '{"gold_label": "neutral", "sentence1": "A.", "sentence2": "B.", "pairID": "7"}\n'
    monkeypatch.setattr(dl, "ARCHIVES", {
        "glue": [(make_zip(src / "RTE.zip", {"RTE/train.tsv": rte}), "glue")],
        "snli": [(make_zip(src / "snli.zip", {"snli_1.0/snli_1.0_dev.jsonl": snli}), ".")],
        "scitail": [(make_zip(src / "sci.zip", {
            "SciTailV1.1/tsv_format/scitail_1.0_dev.tsv": "P.\tH.\tentails\n"}), ".")],
    })
    msr_header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (src / "train.txt").write_text(msr_header + "1\t1\t2\tA.\tB.\n0\t3\t4\tC.\tD.\n")
    (src / "test.txt").write_text(msr_header + "1\t5\t6\tE.\tF.\n")
    (src / "dev_ids.tsv").write_text("3\t4\n")
    monkeypatch.setattr(dl, "MRPC_FILES", {"train": (src / "train.txt").as_uri(),
                                           "test": (src / "test.txt").as_uri(),
                                           "dev_ids": (src / "dev_ids.tsv").as_uri()})
    raw = tmp_path / "raw"
    dl.download(["glue", "snli", "scitail"], raw)

    out = tmp_path / "out"
    run_module("mtdnn.data_prep", "all", "--raw-dir", str(raw), "--out-dir", str(out))
    rows = {p.relative_to(out).as_posix(): [json.loads(x) for x in p.read_text().splitlines()]
            for p in out.glob("*/*.jsonl")}
    assert {k: len(v) for k, v in rows.items()} == {
        "rte/train.jsonl": 1, "mrpc/train.jsonl": 1, "mrpc/dev.jsonl": 1,
        "mrpc/test.jsonl": 1, "snli/dev.jsonl": 1, "scitail/dev.jsonl": 1}
    assert rows["mrpc/dev.jsonl"][0]["sentence1"] == "C."
    assert rows["snli/dev.jsonl"][0]["uid"] == "snli-dev-7"


def test_failed_download_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="download failed"):
        dl.fetch((tmp_path / "missing.zip").as_uri(), tmp_path / "x.zip")
    assert not (tmp_path / "x.zip").exists()


def test_unknown_dataset(tmp_path: Path) -> None:
    result = run_module("mtdnn.data_prep", "download", "--raw-dir", str(tmp_path), "qqp",
                        check=False)
    assert result.returncode == 2 and "unknown dataset 'qqp'" in result.stderr
