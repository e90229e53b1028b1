"""SMART inside the training loop: pass counts per switch, a real short run, resume."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import REPO, head_jsonl
from mtdnn.config.resolve import resolve_config
from mtdnn.modeling.model import MultiTaskModel
from mtdnn.training.trainer import train


@pytest.fixture(scope="module")
def tiny_rte(prepared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("tiny_rte")
    train_file = head_jsonl(prepared_data / "rte/train.jsonl", root / "train.jsonl", 24)
    dev_file = head_jsonl(prepared_data / "rte/dev.jsonl", root / "dev.jsonl", 8)
    return ["tasks=[rte]", f"tasks.rte.train={train_file}", f"tasks.rte.dev={dev_file}",
            f"cache_dir={root / 'cache'}", "batch_size=8", "eval_batch_size=8", "max_steps=3",
            "progress_bar=false", "max_seq_len=32"]


@pytest.mark.parametrize("switches,extra_per_step", [
    ([], 0),
    (["smart.enabled=true", "smart.adv_weight=0", "smart.bregman_weight=0"], 0),
    (["smart.enabled=true", "smart.bregman_weight=0"], 2),  # ascent + adversarial pass
    (["smart.enabled=true", "smart.adv_weight=0"], 1),  # teacher pass
    (["smart.enabled=true"], 3),
])
def test_forward_passes_per_switch(tiny_rte: list[str], tiny_encoder_dir: Path,
                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   switches: list[str], extra_per_step: int) -> None:
    calls = []  # encoder passes: training, SMART's extra passes, evaluation all encode
    original = MultiTaskModel.encode

    def counting(self, *args, **kwargs):
        calls.append(kwargs.get("inputs_embeds") is not None)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MultiTaskModel, "encode", counting)
    config = resolve_config(None, [*tiny_rte, f"encoder={tiny_encoder_dir}",
                                f"output_dir={tmp_path}", *switches])
    summary = train(config)
    steps, eval_passes = 3, 1  # 8 dev examples, eval batch 8, one evaluation at the end
    assert summary["steps"] == steps
    assert len(calls) == steps * (1 + extra_per_step) + eval_passes
    teacher_kept = (tmp_path / "last" / "teacher.safetensors").exists()
    assert teacher_kept == ("smart.enabled=true" in switches
                            and "smart.bregman_weight=0" not in switches)


def run_cli(*overrides: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "train.py", "--config",
                             "tests/fixtures/smart_smoke.yaml", *overrides], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_smart_run_on_scitail_logs_both_terms_and_resumes_exactly(
        prepared_data: Path, tmp_path: Path) -> None:
    dev = head_jsonl(prepared_data / "scitail/dev.jsonl", tmp_path / "dev.jsonl", 32)
    train_file = head_jsonl(prepared_data / "scitail/train.jsonl", tmp_path / "train.jsonl", 235)
    common = [f"tasks.scitail.train={train_file}", f"tasks.scitail.dev={dev}",
              f"cache_dir={tmp_path / 'cache'}", "max_steps=8", "eval_every_steps=2",
              "log_every_steps=1", "progress_bar=false"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert run_cli(*common, f"output_dir={whole}").wait() == 0

    entries = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    train_entries = [e for e in entries if e["kind"] == "train"]
    assert len(train_entries) == 8
    for entry in train_entries:
        assert all(math.isfinite(entry[k]) for k in ("loss", "adv_loss", "bregman_loss"))
        assert 0 < entry["delta_linf"] <= 1e-5 * (1 + 1e-6)
        # the regularisers' strength next to the task loss (λ_s = μ = 1 here)
        assert entry["adv_ratio"] == pytest.approx(entry["adv_loss"] / entry["loss"], rel=1e-3)
        assert entry["bregman_ratio"] == pytest.approx(entry["bregman_loss"] / entry["loss"],
                                                       rel=1e-3)
        assert -1 <= entry["adv_grad_cos"] <= 1
    assert (whole / "last" / "teacher.safetensors").is_file()
    assert (whole / "best" / "teacher.safetensors").is_file()
    # the log's one-line summary says what SMART ran (the default teacher schedule here)
    assert "SMART ε 1e-05, λ_s 1, μ 1, teacher scaled;" in (whole / "train.log").read_text()

    # Kill a second run after its first checkpoint, resume it, compare with the whole run.
    # It starts as a sweep starts a cell (overwrite=true over a folder holding only its
    # claim) and resumes without overwrite: how a run started is not part of its config.
    killed.mkdir()
    (killed / ".claim").write_text("1")
    process = run_cli(*common, f"output_dir={killed}", "overwrite=true")
    info = killed / "last" / "checkpoint.json"
    while not info.exists() and process.poll() is None:
        time.sleep(0.2)
    process.kill()
    process.wait()
    resumed = run_cli(*common, f"output_dir={killed}", f"resume={killed}")
    assert resumed.wait() == 0, resumed.stderr.read()
    for name in ("encoder/model.safetensors", "heads.safetensors", "teacher.safetensors"):
        a, b = load_file(whole / "last" / name), load_file(killed / "last" / name)
        assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6, name
    assert (killed / "metrics.jsonl").read_text() == (whole / "metrics.jsonl").read_text()
