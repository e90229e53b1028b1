"""``pip install .`` into a fresh venv outside the repository: the wheel carries the
commands, the task definitions and everything a run needs, whatever the working folder.

The new venv sees this environment's dependencies through a ``.pth`` line (nothing is
downloaded); mtdnn itself comes only from the wheel built from a copy of the sources.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import REPO, head_jsonl

SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "mtdnn", "data_prep", "task_defs")


def test_pip_install_gives_commands_that_work_outside_the_repo(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, source / name, **({"ignore": shutil.ignore_patterns(
            "__pycache__")} if (REPO / name).is_dir() else {}))
    venv = tmp_path / "venv"
    # without its own pip and setuptools: this environment's (a recent setuptools) build it
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True)
    (Path(purelib.stdout.strip()) / "deps.pth").write_text(sysconfig.get_paths()["purelib"])
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                              "--no-build-isolation", "--no-index", str(source)],
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]

    work = tmp_path / "elsewhere"  # not the repository: nothing relative to it
    work.mkdir()
    where = subprocess.run([str(python), "-c", "import mtdnn, task_defs; "
                            "print(mtdnn.__file__); print(task_defs.__file__)"],
                           cwd=work, capture_output=True, text=True, check=True).stdout
    assert all(str(venv) in line for line in where.splitlines()), where
    for command in ("mtdnn-train", "mtdnn-predict", "mtdnn-prep", "mtdnn-export",
                    "mtdnn-experiment", "mtdnn-probe"):
        shown = subprocess.run([str(venv / "bin" / command), "--help"], cwd=work,
                               capture_output=True, text=True)
        assert shown.returncode == 0 and "usage:" in shown.stdout, (command, shown.stderr)

    files = {split: head_jsonl(prepared_data / "rte" / f"{split}.jsonl",
                               work / f"{split}.jsonl", 16) for split in ("train", "dev")}
    run = subprocess.run([str(venv / "bin" / "mtdnn-train"), "tasks=[rte]",
                          f"tasks.rte.train={files['train']}", f"tasks.rte.dev={files['dev']}",
                          f"encoder={tiny_encoder_dir}", "max_steps=2", "batch_size=8",
                          "max_seq_len=64", "output_dir=run", "progress_bar=false"],
                         cwd=work, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (work / "run" / "best" / "task_defs.yaml").is_file()
    assert "rte:" in (work / "run" / "best" / "task_defs.yaml").read_text()
