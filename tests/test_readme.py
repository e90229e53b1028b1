"""The README's examples run: every YAML block loads as what it is (a task definition, a
run config or an experiment), the inline-task and Python examples run on tiny data, and
every command line names a module and flags that exist."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

README = (REPO / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.M | re.S)


def kind_of(data: dict) -> str:
    if "arms" in data or "launcher" in data:
        return "experiment"
    if all(isinstance(v, dict) and "type" in v for v in data.values()):
        return "task definitions"
    return "run config"


@pytest.mark.parametrize("text", blocks("yaml"), ids=lambda t: t.split("\n", 1)[0][:40])
def test_every_yaml_example_loads(text: str, tmp_path: Path) -> None:
    from mtdnn.config import resolve_config
    from mtdnn.experiment import load_experiment
    from mtdnn.task_def import load_task_file

    data = yaml.safe_load(text)
    path = tmp_path / "example.yaml"
    kind = kind_of(data)
    if kind == "experiment":
        path.write_text(yaml.safe_dump({"arms": {"plain": None}, **data}))
        assert load_experiment(path, []).arms
    elif kind == "task definitions":
        path.write_text(text)
        assert load_task_file(path)
    else:
        from mtdnn.config import select_tasks

        config = resolve_config(data, origin="README")
        assert select_tasks(config)  # inline definitions included


def test_the_inline_task_example_trains(tmp_path: Path, tiny_encoder_dir: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The 'Your own data' example as written, on a tiny CSV and a local dataset folder
    with the columns it names."""
    from mtdnn import train

    example = next(b for b in blocks("yaml") if "my_reviews" in b)
    monkeypatch.chdir(tmp_path)
    rows = "".join(f"{'good fine great' if i % 2 else 'bad poor awful'} {i},"
                   f"{'pos' if i % 2 else 'neg'}\n" for i in range(12))
    (tmp_path / "my_reviews").mkdir()
    (tmp_path / "my_reviews" / "train.csv").write_text("text,stars\n" + rows)
    (tmp_path / "my_reviews" / "validation.csv").write_text("text,stars\n" + rows)
    summary = train(yaml.safe_load(example), encoder=str(tiny_encoder_dir), max_steps=2,
                    batch_size=4, max_seq_len=32, output_dir="run", cache_dir="cache",
                    progress_bar=False)
    assert set(summary["best"]["metrics"]["reviews"]) == {"accuracy"}


def test_the_python_example_runs(tmp_path: Path, prepared_data: Path) -> None:
    """The 'Installed, and from Python' example, verbatim, from another folder."""
    (example,) = [b for b in blocks("python") if "from mtdnn import" in b]
    (tmp_path / "data").symlink_to(prepared_data)
    script = tmp_path / "example.py"
    script.write_text(example.replace("predictor.predict(", "print(predictor.predict(", 1)
                      .replace('tasks=["rte", "mnli"])', 'tasks=["rte", "mnli"]))'))
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, text=True,
                         capture_output=True, env={"HF_HUB_OFFLINE": "1",
                                                   "PATH": "/usr/bin:/bin",
                                                   "MTDNN_CACHE": str(tmp_path / "cache")})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "'rte': {'prediction'" in ran.stdout and "'mnli': {'prediction'" in ran.stdout


COMMANDS = {"python train.py": "mtdnn.cli:train", "python predict.py": "mtdnn.cli:predict",
            "mtdnn-train": "mtdnn.cli:train", "mtdnn-predict": "mtdnn.cli:predict"}


def command_lines() -> list[str]:
    lines = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith(("python -m ", "python train.py", "python predict.py",
                                "mtdnn-", "torchrun")):
                lines.append(line)
    return lines


@pytest.mark.parametrize("line", command_lines(), ids=lambda line: line[:60])
def test_every_command_line_names_a_command_and_flags_that_exist(line: str) -> None:
    words = shlex.split(line.replace("[key=value ...]", ""))
    if words[0] == "torchrun":
        words = ["python", *words[next(i for i, w in enumerate(words) if w.endswith(".py")):]]
    if words[:2] == ["python", "-m"]:
        module, rest = words[2], words[3:]
        argv = [sys.executable, "-m", module]
    else:
        script = words[1] if words[0] == "python" else None
        rest = words[2:] if script else words[1:]
        argv = [sys.executable, script] if script else [str(Path(sys.executable).parent
                                                            / words[0])]
    subcommand = [rest[0]] if rest and not rest[0].startswith("-") and "=" not in rest[0] \
        else []
    shown = subprocess.run([*argv, *subcommand, "--help"], cwd=REPO, text=True,
                           capture_output=True)
    assert shown.returncode == 0, shown.stderr[-2000:]
    for flag in (w.split("=")[0] for w in rest if w.startswith("--")):
        assert flag in shown.stdout, f"{flag} is not an option of {' '.join(argv[1:])}"
