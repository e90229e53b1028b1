"""A run SIGKILLed in the middle of writing a checkpoint keeps its previous one, resumes
from it and ends with the same weights as a run that was never interrupted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import REPO, head_jsonl
from mtdnn.runs.checkpoint import check_checkpoint, load_model

# Runs train.py's main in a child process whose second checkpoint save kills the process
# after the encoder is written and while the heads file is being written.
KILL_DURING_SECOND_SAVE = """
import os, signal, sys
import safetensors.torch as safetensors_torch  # the checkpoint writer's save_file
calls = []
real = safetensors_torch.save_file
def dying_save_file(tensors, path, *args, **kwargs):
    if str(path).endswith("heads.safetensors"):
        calls.append(path)
        if len(calls) == 2:
            open(path, "wb").write(b"partial")
            os.kill(os.getpid(), signal.SIGKILL)
    return real(tensors, path, *args, **kwargs)
safetensors_torch.save_file = dying_save_file
sys.argv = ["train.py", *sys.argv[1:]]
import runpy
runpy.run_path("train.py", run_name="__main__")
"""


def scalar_steps(run: Path) -> dict[str, list[int]]:
    """Each tensorboard scalar's steps, as tensorboard reads the run's event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard")).Reload()
    return {tag: [event.step for event in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


# fp32, and bf16 autocast (emulated where the CPU has no bf16: the same kernels either way,
# so resume is exact in both); SMART's ε is above the bf16 floor in the bf16 run.
PRECISIONS = {"fp32": ["precision=fp32"],
              "bf16": ["precision=bf16", "smart.epsilon=1e-2", "smart.noise_std=1e-2",
                       "smart.step_size=1.0"]}


@pytest.mark.slow
@pytest.mark.parametrize("precision", PRECISIONS)
def test_kill_during_checkpoint_write_then_resume(prepared_data: Path, tiny_encoder_dir: Path,
                                                  tmp_path: Path, precision: str) -> None:
    rows = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "rte.jsonl", 40)
    common = ["tasks=[rte]", f"tasks.rte.train={rows}", f"tasks.rte.dev={rows}",
              f"encoder={tiny_encoder_dir}", "batch_size=8", "max_steps=8", "eval_every_steps=2",
              "progress_bar=false", f"cache_dir={tmp_path / 'cache'}", "smart.enabled=true",
              "keep_last_n=2", *PRECISIONS[precision]]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run = subprocess.run([sys.executable, "train.py", *common, f"output_dir={whole}"], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert sorted(p.name for p in (whole / "checkpoints").iterdir()) == ["step-6", "step-8"]

    died = subprocess.run([sys.executable, "-c", KILL_DURING_SECOND_SAVE, *common,
                           f"output_dir={killed}"], cwd=REPO, capture_output=True, text=True)
    assert died.returncode == -9
    assert list(killed.glob(".last.*.tmp"))  # the interrupted save's temporary folder
    check_checkpoint(killed / "last")  # ... while `last` is the complete step-2 checkpoint
    assert '"step": 2' in (killed / "last" / "checkpoint.json").read_text()
    load_model(killed / "last")

    resumed = subprocess.run([sys.executable, "train.py", *common, f"output_dir={killed}",
                              f"resume={killed}"], cwd=REPO, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not list(killed.glob(".*.tmp"))
    for name in ("encoder/model.safetensors", "heads.safetensors", "teacher.safetensors"):
        a, b = load_file(whole / "last" / name), load_file(killed / "last" / name)
        assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6, name
    assert (killed / "metrics.jsonl").read_text() == (whole / "metrics.jsonl").read_text()
    # tensorboard too: the events the killed run logged after step 2 are dropped
    assert scalar_steps(killed) == scalar_steps(whole)
    assert scalar_steps(whole)["eval/rte/accuracy"] == [2, 4, 5, 6, 8]  # 5: the epoch end
    assert f"precision: {precision}" in (killed / "last" / "config.yaml").read_text()
    # The summary counts the training of both processes, up to the step resumed from
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["resumed_from_step"] == 2
    assert json.loads((whole / "summary.json").read_text())["resumed_from_step"] == 0
    assert summary["train_examples_per_s"] == pytest.approx(8 * 8 / summary["train_seconds"],
                                                            rel=0.01)


# A training state whose unpickling would create a file: pickle calls what the file names.
CRAFTED_STATE = """
import sys, torch
class CreatesAFile:
    def __reduce__(self):
        return (open, (sys.argv[2], "w"))
torch.save({"run": CreatesAFile(), "optimizer": {}, "rng": {}}, sys.argv[1])
"""


def test_a_training_state_that_would_run_code_is_refused(prepared_data: Path,
                                                         tiny_encoder_dir: Path,
                                                         tmp_path: Path) -> None:
    rows = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "rte.jsonl", 16)
    common = ["tasks=[rte]", f"tasks.rte.train={rows}", f"tasks.rte.dev={rows}",
              f"encoder={tiny_encoder_dir}", "batch_size=8", "max_steps=2",
              "progress_bar=false", f"cache_dir={tmp_path / 'cache'}"]
    run = tmp_path / "run"
    trained = subprocess.run([sys.executable, "train.py", *common, f"output_dir={run}"],
                             cwd=REPO, capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr[-2000:]
    state, marker = run / "last" / "training_state.pt", tmp_path / "created-by-the-pickle"
    subprocess.run([sys.executable, "-c", CRAFTED_STATE, str(state), str(marker)], check=True)
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    resumed = subprocess.run([sys.executable, "train.py", *common, "max_steps=4",
                              f"output_dir={run}", f"resume={run}"], cwd=REPO,
                             capture_output=True, text=True)
    assert resumed.returncode == 2
    assert not marker.exists()  # nothing of the file ran
    error = resumed.stderr.strip().splitlines()[-1]
    assert "training_state.pt" in error and "refused to load this training state" in error
    assert "io.open" in error and "init_checkpoint" in error
    # the state is read before anything is written: the run folder is as it was, byte for byte
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before


# Ctrl-C at the third gradient clip: steps 1 and 2 are saved, step 3 is not.
INTERRUPT_AT_THIRD_STEP = """
import sys, runpy, torch
from unittest import mock
real, calls = torch.nn.utils.clip_grad_norm_, []
def interrupted(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
        raise KeyboardInterrupt
    return real(*args, **kwargs)
with mock.patch("torch.nn.utils.clip_grad_norm_", interrupted):
    sys.argv = ["train.py", *sys.argv[1:]]
    runpy.run_path("train.py", run_name="__main__")
"""


def whole_and_stopped(common: list[str], tmp_path: Path) -> tuple[Path, Path, str]:
    """Train ``common`` to its end in ``whole``, and again in ``run`` stopped by Ctrl-C at
    the third step; returns both folders and what the stopped run printed."""
    whole, run = tmp_path / "whole", tmp_path / "run"
    done = subprocess.run([sys.executable, "train.py", *common, f"output_dir={whole}"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    stopped = subprocess.run([sys.executable, "-c", INTERRUPT_AT_THIRD_STEP, *common,
                              f"output_dir={run}"], cwd=REPO, capture_output=True, text=True)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    return whole, run, stopped.stderr


def test_the_printed_resume_command_continues_the_run_as_it_is_written(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    import shlex

    rows = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "rte.jsonl", 32)
    common = ["tasks=[rte]", f"tasks.rte.train={rows}", f"tasks.rte.dev={rows}",
              f"encoder={tiny_encoder_dir}", "batch_size=8", "max_steps=4",
              "save_every_steps=1", "progress_bar=false", f"cache_dir={tmp_path / 'cache'}",
              "precision=fp32"]
    whole, run, printed = whole_and_stopped(common, tmp_path)
    words = shlex.split(printed.strip().splitlines()[-1].split("continue with ", 1)[1])
    assert words == ["mtdnn-train", f"resume={run}"]  # nothing else to remember
    words[0] = str(Path(sys.executable).parent / "mtdnn-train")
    resumed = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stderr and "at step 2" in resumed.stderr
    assert (run / "metrics.jsonl").read_text() == (whole / "metrics.jsonl").read_text()


def test_a_pcgrad_run_resumes_to_the_same_metrics(prepared_data: Path, tiny_encoder_dir: Path,
                                                  tmp_path: Path) -> None:
    """PCGrad projects the task gradients in a random order: a resumed run draws the order
    the uninterrupted one would have drawn, so that its steps are the same steps."""
    tasks = ("rte", "mrpc", "sst2")  # with three, the order of the projections matters
    rows = {task: head_jsonl(prepared_data / f"{task}/train.jsonl", tmp_path / f"{task}.jsonl",
                             32) for task in tasks}
    common = [f"tasks=[{','.join(tasks)}]", "sampler.kind=cycle",
              *(f"tasks.{task}.{split}={rows[task]}" for task in tasks
                for split in ("train", "dev")),
              "pcgrad=true", f"encoder={tiny_encoder_dir}", "batch_size=4", "max_steps=6",
              "save_every_steps=1", "progress_bar=false", "precision=fp32",
              f"cache_dir={tmp_path / 'cache'}"]
    whole, run, printed = whole_and_stopped(common, tmp_path)
    resumed = subprocess.run([sys.executable, "train.py", f"resume={run}"], cwd=REPO,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    entries = [json.loads(x) for x in (whole / "metrics.jsonl").read_text().splitlines()]
    assert any(e.get("pcgrad_conflicts", 0) > 0 for e in entries)  # projections happened
    assert (run / "metrics.jsonl").read_text() == (whole / "metrics.jsonl").read_text()
