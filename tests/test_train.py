"""End-to-end: the real train.py CLI on real data with the 2-layer packaged encoder."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModel

from conftest import REPO, head_jsonl, run_module
from mtdnn.config import load_config
from mtdnn.trainer import train


def run_train(*overrides: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "train.py", "--config", "experiments/smoke.yaml",
                             "progress_bar=false", *overrides],
                            cwd=REPO, text=True, capture_output=True)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr[-3000:])
    return result


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def small_tasks(prepared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """RTE + MRPC + a SciTail subset, with 48-example dev sets: the smoke run's task files."""
    root = tmp_path_factory.mktemp("tasks")
    run_module("data_prep", "subsets", "--data-dir", str(prepared_data), "--task", "scitail",
               "--count", "235", "--out-dir", str(root / "scitail"))
    overrides = [f"data_dir={prepared_data}", f"cache_dir={root / 'cache'}",
                 f"tasks.scitail.train={root / 'scitail' / 'n235.jsonl'}"]
    for task in ("rte", "mrpc", "scitail"):
        dev = head_jsonl(prepared_data / task / "dev.jsonl", root / f"{task}_dev.jsonl", 48)
        overrides.append(f"tasks.{task}.dev={dev}")
    return overrides


@pytest.fixture(scope="module")
def stage_one(small_tasks: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("stage1") / "run"
    # Near-uniform temperature sampling, so that 24 steps see every task.
    run_train(*small_tasks, f"output_dir={run}", "max_steps=24", "eval_every_steps=12",
              "batch_size=8", "log_every_steps=4", "sampler.kind=temperature",
              "sampler.temperature=100")
    return run


def test_multi_task_run_writes_metrics_and_checkpoints(stage_one: Path) -> None:
    entries = read_metrics(stage_one)
    train_losses = [e for e in entries if e["kind"] == "train"]
    assert {e["task"] for e in train_losses} == {"rte", "mrpc", "scitail"}
    assert all(math.isfinite(e["loss"]) for e in train_losses)
    evals = [e for e in entries if e["kind"] == "eval"]
    assert [e["step"] for e in evals] == [12, 24]
    assert set(evals[0]["metrics"]) == {"rte", "mrpc", "scitail"}
    assert set(evals[0]["metrics"]["mrpc"]) == {"accuracy", "f1"}
    for name in ("best", "last"):
        folder = stage_one / name
        for item in ("encoder/config.json", "encoder/model.safetensors", "heads.safetensors",
                     "task_defs.yaml", "config.yaml", "checkpoint.json"):
            assert (folder / item).exists(), f"{name}/{item}"
    best_step = max(evals, key=lambda e: e["score"])["step"]
    assert json.loads((stage_one / "best/checkpoint.json").read_text())["step"] == best_step
    assert (stage_one / "config.yaml").read_text() == (stage_one / "best/config.yaml").read_text()
    assert list((stage_one / "tensorboard").iterdir())


def test_checkpoint_encoder_loads_in_plain_transformers(stage_one: Path) -> None:
    encoder = AutoModel.from_pretrained(stage_one / "best" / "encoder")
    assert encoder.config.num_hidden_layers == 2
    out = encoder(input_ids=torch.tensor([[101, 7592, 102]]))
    assert out.last_hidden_state.shape == (1, 3, 384)


def test_second_stage_starts_from_the_shared_checkpoint(stage_one: Path, small_tasks: list[str],
                                                       tmp_path: Path) -> None:
    run = tmp_path / "rte"
    rte_dev = next(o for o in small_tasks if o.startswith("tasks.rte.dev="))
    result = run_train(*small_tasks, "tasks=null", rte_dev,
                       f"init_checkpoint={stage_one / 'best'}", f"output_dir={run}",
                       "max_steps=6", "optimizer.lr=1e-4", "batch_size=8")
    assert "encoder, heads of rte" in result.stderr
    config = (run / "best" / "config.yaml").read_text()
    assert "lr: 0.0001" in config and f"init_checkpoint: {stage_one / 'best'}" in config
    assert list(json.loads((run / "best/checkpoint.json").read_text())["metrics"]) == ["rte"]


def test_unknown_task_is_a_clear_error(small_tasks: list[str], tmp_path: Path) -> None:
    result = run_train(*small_tasks, "tasks=[rte,qqp]", f"output_dir={tmp_path}", check=False)
    assert result.returncode == 2
    assert "key 'tasks': unknown task 'qqp'" in result.stderr and "Traceback" not in result.stderr


def test_identical_runs_give_identical_losses(small_tasks: list[str], tmp_path: Path) -> None:
    losses = []
    for name in ("a", "b"):
        config = load_config(REPO / "experiments/smoke.yaml", [
            *small_tasks, f"output_dir={tmp_path / name}", "max_steps=6", "log_every_steps=1",
            "batch_size=8", "progress_bar=false", "eval_every_steps=6"])
        train(config)
        losses.append([(e["step"], e["task"], e["loss"]) for e in read_metrics(tmp_path / name)
                       if e["kind"] == "train"])
    assert len(losses[0]) >= 6
    assert losses[0] == losses[1]
