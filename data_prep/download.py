"""Download the official raw files into the layout ``python -m mtdnn.data_prep`` reads.

For users with internet access; nothing in the tests, CI or the demo calls the network
(the tests run this module on ``file://`` URLs of hand-made archives).

Layout written under ``--raw-dir``: ``glue/<Task>/*.tsv``, ``snli_1.0/*.jsonl`` and
``SciTailV1.1/tsv_format/*.tsv``.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_path

GLUE_URL = "https://dl.fbaipublicfiles.com/glue/data/{}.zip"
# dataset -> list of (url, folder under raw_dir to extract the archive into)
ARCHIVES: dict[str, list[tuple[str, str]]] = {
    "glue": [(GLUE_URL.format(name), "glue")
             for name in ("CoLA", "SST-2", "STS-B", "QNLIv2", "RTE", "WNLI", "MNLI")],
    "snli": [("https://nlp.stanford.edu/projects/snli/snli_1.0.zip", ".")],
    "scitail": [("https://ai2-public-datasets.s3.amazonaws.com/scitail/SciTailV1.1.zip", ".")],
}
# MRPC is distributed by Microsoft as two text files; GLUE's dev split is a list of ids.
MRPC_FILES = {
    "train": "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt",
    "test": "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_test.txt",
    "dev_ids": "https://dl.fbaipublicfiles.com/glue/data/mrpc_dev_ids.tsv",
}


def fetch(url: str, target: Path) -> Path:
    """Copy ``url`` to ``target`` through a temporary name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"download {url}")
    with atomic_path(target) as tmp:
        try:
            with urllib.request.urlopen(url) as response, open(tmp, "wb") as handle:
                shutil.copyfileobj(response, handle)
        except OSError as error:
            raise MtdnnError(f"download failed: {error}", file=url,
                             allowed="a reachable URL; or put the files under --raw-dir yourself"
                             ) from None
    return target


def extract(url: str, into: Path) -> None:
    """Download a zip archive and unpack it into ``into``; QNLIv2 unpacks as QNLI."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = fetch(url, Path(tmp) / "archive.zip")
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(into)
    for junk in into.glob("__MACOSX"):
        shutil.rmtree(junk)


def text_lines(path: Path) -> list[str]:
    """The lines of a text file, split on line ends only (U+2028 and friends inside a text
    are text, as the ``csv`` module and GLUE's readers treat them)."""
    text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    return [line for line in text.split("\n") if line]


def build_mrpc(glue_dir: Path) -> None:
    """GLUE's MRPC train/dev/test tsv files from Microsoft's release and GLUE's dev ids."""
    with tempfile.TemporaryDirectory() as tmp:
        files = {name: fetch(url, Path(tmp) / name) for name, url in MRPC_FILES.items()}
        dev_ids = {tuple(line.split("\t")[:2]) for line in
                   text_lines(files["dev_ids"]) if line}
        header, *rows = text_lines(files["train"])
        out = glue_dir / "MRPC"
        out.mkdir(parents=True, exist_ok=True)
        for split, keep_dev in (("train", False), ("dev", True)):
            chosen = [r for r in rows if (tuple(r.split("\t")[1:3]) in dev_ids) == keep_dev]
            (out / f"{split}.tsv").write_text("\n".join([header, *chosen]) + "\n",
                                              encoding="utf-8")
        _, *test_rows = text_lines(files["test"])
        test = ["index\t#1 ID\t#2 ID\t#1 String\t#2 String"] + [
            f"{i}\t" + "\t".join(row.split("\t")[1:]) for i, row in enumerate(test_rows)]
        (out / "test.tsv").write_text("\n".join(test) + "\n", encoding="utf-8")


def download(datasets: list[str], raw_dir: Path) -> None:
    """Fetch ``datasets`` (glue, snli, scitail) into ``raw_dir``."""
    for name in datasets:
        for url, folder in ARCHIVES[name]:
            extract(url, raw_dir / folder)
        if name == "glue":
            qnli = raw_dir / "glue" / "QNLIv2"
            if qnli.is_dir():
                shutil.rmtree(raw_dir / "glue" / "QNLI", ignore_errors=True)
                qnli.rename(raw_dir / "glue" / "QNLI")
            build_mrpc(raw_dir / "glue")
    print(f"raw files are in {raw_dir}; next: python -m mtdnn.data_prep all --raw-dir {raw_dir}")
