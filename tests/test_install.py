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

import pytest

from conftest import REPO, head_jsonl

SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "mtdnn", "data_prep", "task_defs",
           "experiments")


@pytest.mark.slow
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
    where = subprocess.run([str(python), "-c", "import mtdnn, mtdnn.data_prep; "
                            "from mtdnn.tasks.task_def import DEFAULT_TASK_DEFS_DIR as d; "
                            "print(mtdnn.__file__); print(mtdnn.data_prep.__file__); "
                            "print(sorted(p.name for p in d.glob('*.yaml')))"],
                           cwd=work, capture_output=True, text=True, check=True).stdout
    *modules, shipped = where.splitlines()
    assert all(str(venv) in line for line in modules), where
    assert shipped == str(sorted(p.name for p in (REPO / "task_defs").glob("*.yaml"))), where
    top_level = {p.name for p in Path(modules[0]).parent.parent.iterdir()}
    assert not {"data_prep", "task_defs"} & top_level  # no generic top-level packages
    # setup.cfg lists every package of the tree (the two mapped folders included)
    listed = {line.strip() for line in (REPO / "setup.cfg").read_text().split(
        "packages =", 1)[1].split("package_dir", 1)[0].splitlines() if line.strip()}
    tree = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "mtdnn").rglob(
        "__init__.py")} | {"mtdnn.data_prep", "mtdnn.task_defs", "mtdnn.experiments"}
    assert listed == tree
    # the experiments ship with the package: listed, and loaded by name from elsewhere
    shown = subprocess.run([str(venv / "bin" / "mtdnn-experiment"), "--list-configs"],
                           cwd=work, capture_output=True, text=True)
    assert shown.returncode == 0 and shown.stdout.startswith("demo "), shown.stderr
    loaded = subprocess.run([str(python), "-c", "from mtdnn.experiment import load_experiment; "
                             "print(sorted(load_experiment('demo', []).arms))"], cwd=work,
                            capture_output=True, text=True)
    assert loaded.returncode == 0 and "mt-dnn" in loaded.stdout, loaded.stderr
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

    # what a new user does next, from the installed package: the packaged configs, a model
    # with a one-text head and a pair head, prediction from a CSV, both heads in one call
    listed = subprocess.run([str(venv / "bin" / "mtdnn-train"), "--list-configs"], cwd=work,
                            capture_output=True, text=True)
    assert listed.returncode == 0 and "demo_stage1" in listed.stdout
    assert str(venv) in listed.stdout  # the configs came with the wheel
    sst2 = head_jsonl(prepared_data / "sst2" / "dev.jsonl", work / "sst2.jsonl", 16)
    two = subprocess.run([str(venv / "bin" / "mtdnn-train"), "tasks=[rte,sst2]",
                          f"tasks.rte.train={files['train']}", f"tasks.rte.dev={files['dev']}",
                          f"tasks.sst2.train={sst2}", f"tasks.sst2.dev={sst2}",
                          f"encoder={tiny_encoder_dir}", "max_steps=2", "batch_size=8",
                          "max_seq_len=64", "output_dir=two", "progress_bar=false"],
                         cwd=work, capture_output=True, text=True)
    assert two.returncode == 0, two.stderr[-3000:]
    (work / "mine.csv").write_text("premise,hypothesis\nA man plays.,Someone plays.\n"
                                   "It rains.,The street is dry.\n")
    predicted = subprocess.run([str(venv / "bin" / "mtdnn-predict"), "--checkpoint", "two/best",
                                "--task", "rte", "--input", "mine.csv", "--columns",
                                "{sentence1: premise, sentence2: hypothesis}", "--output",
                                "out.csv", "--no-progress"], cwd=work, capture_output=True,
                               text=True)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    assert (work / "out.csv").read_text().startswith("uid,prediction,p(entailment)")
    both = subprocess.run([str(python), "-c", (
        "from mtdnn import Predictor\n"
        "p = Predictor('two/best')\n"
        "out = p.predict([{'sentence': 'A fine film.', 'sentence1': 'A.', 'sentence2': 'B.'}],"
        " tasks=['sst2', 'rte'])\n"
        "print(sorted(out[0]))")], cwd=work, capture_output=True, text=True)
    assert both.returncode == 0, both.stderr[-3000:]
    assert both.stdout.strip() == "['rte', 'sst2']"
    # the README's Python example (verbatim, its prediction printed), installed package
    from test_readme import python_example

    (work / "data").symlink_to(prepared_data)
    (work / "example.py").write_text(python_example())
    ran = subprocess.run([str(python), "example.py"], cwd=work, capture_output=True, text=True,
                         env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                              "MTDNN_CACHE": str(work / "cache")})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "'rte': {'prediction'" in ran.stdout and "'mnli': {'prediction'" in ran.stdout
    assert (work / "runs" / "api_demo" / "best" / "checkpoint.json").is_file()
    # from Python too, the run's log has its lines (its dev scores, on 500 MNLI pairs)
    assert 'INFO step 10 epoch 0 dev {"rte": {"accuracy":' in \
        (work / "runs" / "api_demo" / "train.log").read_text()
