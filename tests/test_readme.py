"""The README's examples run: every YAML block loads as what it is (a task definition, a
run config or an experiment), the inline-task example runs on tiny data (the Python example
runs in tests/test_install.py, from the installed wheel), its command lines run as written
from a fresh folder (those that download or train for hours resolve their configs as the
command would), and every command line of the README and the docs names a module and flags
that exist."""

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
    from mtdnn.config.resolve import resolve_config
    from mtdnn.experiment import load_experiment
    from mtdnn.tasks.task_def import load_task_file

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
        from mtdnn.tasks.task_def import select_tasks

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


def python_example() -> str:
    """The 'Installed, and from Python' example, verbatim but for a print of its prediction.
    tests/test_install.py runs it with the package installed from a wheel, in a folder
    outside the repository."""
    (example,) = [b for b in blocks("python") if "from mtdnn import" in b]
    printing = (example.replace("predictor.predict(", "print(predictor.predict(", 1)
                .replace('tasks=["rte", "mnli"])', 'tasks=["rte", "mnli"]))'))
    assert printing.count("print(") == 1, "the README's Python example changed its last call"
    return printing


# The README's commands that run here as written (in the README's order, from a fresh
# folder beside a copy of ../shared), and those only resolved: they download (no network
# here) or train for hours, so their config and keys are resolved as the command would.
NEEDS_NETWORK = ("python -m mtdnn.data_prep download",)
TRAINS_FOR_HOURS = ("python train.py", "torchrun", "python -m mtdnn.smart_probe",
                    "python -m mtdnn.experiment")


COMMANDS = {"python train.py": "mtdnn.cli:train", "python predict.py": "mtdnn.cli:predict",
            "mtdnn-train": "mtdnn.cli:train", "mtdnn-predict": "mtdnn.cli:predict"}


def command_lines(text: str = README) -> list[str]:
    """Every command of a page (the README), in order: the lines of its shell blocks and
    the commands in its tables' cells."""
    starts = ("python -m ", "python train.py", "python predict.py", "mtdnn-", "torchrun")
    lines = []
    parts = re.split(r"^```bash\n(.*?)^```", text, flags=re.M | re.S)
    for index, chunk in enumerate(parts):  # text, shell block, text, shell block, ...
        if index % 2:
            candidates = [line.split(" #", 1)[0].strip()
                          for line in chunk.replace("\\\n", " ").splitlines()]
        else:
            candidates = [code for row in chunk.splitlines() if row.startswith("|")
                          for code in re.findall(r"`([^`]+)`", row)]
        lines += [line for line in candidates if line.startswith(starts)]
    return lines


# The docs' pages for readers (docs/history.md keeps former commands as they were).
DOC_COMMANDS = [line for page in ("results.md", "performance.md")
                for line in command_lines((REPO / "docs" / page).read_text())]


@pytest.mark.parametrize("line", [line for line in DOC_COMMANDS
                                  if line.startswith(TRAINS_FOR_HOURS)], ids=lambda line: line[:60])
def test_every_training_command_in_the_docs_resolves(line: str) -> None:
    resolve_as_the_command_would(shlex.split(line))


@pytest.mark.parametrize("line", command_lines() + DOC_COMMANDS, ids=lambda line: line[:60])
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


def command_argv(words: list[str]) -> list[str]:
    """A README command line as this interpreter runs it."""
    if words[:2] == ["python", "-m"]:
        return [sys.executable, *words[1:]]
    if words[0] == "python":
        return [sys.executable, str(REPO / words[1]), *words[2:]]
    return [str(Path(sys.executable).parent / words[0]), *words[1:]]


def resolve_as_the_command_would(words: list[str]) -> None:
    """The run or experiment config a training command would start with, from the repo."""
    from mtdnn.analysis.smart_probe import probe_config
    from mtdnn.config.resolve import resolve_config
    from mtdnn.experiment import load_experiment
    from mtdnn.experiment.command import chosen_arms, launcher_overrides

    if words[0] == "torchrun":
        words = ["python", *words[next(i for i, w in enumerate(words) if w.endswith(".py")):]]
    flags: dict[str, list[str]] = {}
    keys: list[str] = []
    for word in words[3:] if words[1] == "-m" else words[2:]:
        if word.startswith("--"):
            flag = flags.setdefault(word, [])
        elif "=" in word:
            keys.append(word)
        else:
            flag.append(word)
    config = (flags.get("--config") or [None])[0]
    if words[:3] == ["python", "-m", "mtdnn.experiment"]:
        launcher = argparse_like(flags)
        experiment = load_experiment(config, [*keys, *launcher_overrides(launcher)])
        assert experiment.arms
        if "--arms" in flags:
            assert chosen_arms(experiment, flags["--arms"][0])
    elif words[:3] == ["python", "-m", "mtdnn.smart_probe"]:
        assert probe_config(config, flags["--task"][0], keys).tasks
    else:
        assert resolve_config(config, keys).tasks


def data_it_would_read(words: list[str], work: Path) -> list[str]:
    """The data files a training command's tasks would read that are not in ``work`` (a
    stage-2 command reads its checkpoint's, which the README's steps train first)."""
    import os

    from mtdnn.config.resolve import resolve_config
    from mtdnn.data.sources import task_sources

    if words[0] == "torchrun":
        words = ["python", *words[next(i for i, w in enumerate(words) if w.endswith(".py")):]]
    if words[:2] != ["python", "train.py"] or any(w.startswith("init_checkpoint=")
                                                  for w in words):
        return []
    config = words[words.index("--config") + 1] if "--config" in words else None
    keys = [w for w in words[2:] if "=" in w and not w.startswith("--")]
    if config is not None and (REPO / config).is_file():
        config = str(REPO / config)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        resolved = resolve_config(config, keys)
        return [str(source) for task in resolved.tasks for source in task_sources(resolved, task)
                if isinstance(source, str) and not (work / source).is_file()]
    finally:
        os.chdir(cwd)


def argparse_like(flags: dict[str, list[str]]) -> object:
    from types import SimpleNamespace

    def one(name: str) -> str | None:
        return (flags.get(name) or [None])[0]

    return SimpleNamespace(launcher=one("--launcher"), jobs=one("--jobs"),
                           threads_per_job=one("--threads-per-job"))


def tiny_checkpoint(data: Path, encoder: Path, out: Path) -> Path:
    """A tiny model with the heads the README's prediction and export commands ask for."""
    from conftest import head_jsonl
    from mtdnn import train

    small = {task: {"train": str(head_jsonl(data / task / "train.jsonl",
                                            out.parent / f"{task}_train.jsonl", 16)),
                    "dev": str(head_jsonl(data / task / "dev.jsonl",
                                          out.parent / f"{task}_dev.jsonl", 8))}
             for task in ("scitail", "rte", "snli")}
    train(None, tasks=small, encoder=str(encoder), max_steps=2, batch_size=8, max_seq_len=64,
          output_dir=str(out), cache_dir=str(out.parent / "cache"), progress_bar=False,
          precision="fp32")
    return out / "last"


@pytest.mark.slow
def test_the_readme_commands_run_as_written(tmp_path: Path, shared_data: Path,
                                            tiny_encoder_dir: Path) -> None:
    """Each command line of the README, in order, from a fresh folder: data preparation,
    subsets, prediction (with a tiny model at the checkpoint paths the README names),
    export and the agreement files run and write what they say; the rest resolve."""
    import shutil

    (tmp_path / "shared").symlink_to(shared_data.parent)
    work = tmp_path / "work"
    work.mkdir()
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "MTDNN_CACHE": str(tmp_path / "c"),
           "TOKENIZERS_PARALLELISM": "false"}
    ran, resolved = [], []
    for line in command_lines():
        words = shlex.split(line.replace("[key=value ...]", ""))
        if line.startswith(NEEDS_NETWORK):
            continue
        if line.startswith(TRAINS_FOR_HOURS) and "--report-only" not in line:
            resolve_as_the_command_would(words)
            missing = data_it_would_read(words, work)
            assert not missing, (line, "reads files the README's steps before it do not "
                                       "prepare", missing)
            resolved.append(line)
            continue
        if line.startswith(("python predict.py", "python -m mtdnn.export")) and \
                not (work / "A").exists():
            last = tiny_checkpoint(work / "data", tiny_encoder_dir, tmp_path / "tiny")
            for folder in ("runs/demo/mt-dnn/scitail/1pct/seed13-stage13", "A", "B", "runs/rte",
                           "runs/demo/stages/mt-dnn/seed13"):
                shutil.copytree(last, work / folder / "best")
        if "agreement report" in line:
            for name in ("a", "b"):
                made = subprocess.run(
                    command_argv(["python", "predict.py", "--checkpoint", "A/best", "--task",
                                  "snli", "--input", "data/snli/dev.jsonl", "--output",
                                  f"preds_{name}.jsonl"]),
                    cwd=work, env=env, text=True, capture_output=True)
                assert made.returncode == 0, made.stderr[-2000:]
        if "--report-only" in line:  # an experiment's tables from its published records
            words += ["output_dir=" + str(tmp_path / "report")]
            shutil.copytree(REPO / "experiments", work / "experiments", dirs_exist_ok=True)
            shutil.copytree(REPO / "results", work / "results", dirs_exist_ok=True)
        done = subprocess.run(command_argv(words), cwd=work, env=env, text=True,
                              capture_output=True)
        assert done.returncode == 0, (line, done.stderr[-3000:])
        for flag in ("--output", "--out", "--out-dir"):
            if flag in words:
                written = work / words[words.index(flag) + 1]
                if "agreement report" in line:  # --out is the stem of .md, .json and .png
                    written = written.with_suffix(".md")
                assert written.exists(), (line, flag)
        ran.append(line)
    assert len(ran) >= 12 and len(resolved) >= 8, (ran, resolved)
