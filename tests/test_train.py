"""End-to-end: the real train.py CLI on real data with the 2-layer packaged encoder."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModel

from conftest import REPO, head_jsonl, read_metrics, run_train
from mtdnn.config.resolve import resolve_config
from mtdnn.training.trainer import train


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
        config = resolve_config(REPO / "tests/fixtures/smoke.yaml", [
            *small_tasks, f"output_dir={tmp_path / name}", "max_steps=6", "log_every_steps=1",
            "batch_size=8", "progress_bar=false", "eval_every_steps=6"])
        train(config)
        losses.append([(e["step"], e["task"], e["loss"]) for e in read_metrics(tmp_path / name)
                       if e["kind"] == "train"])
    assert len(losses[0]) >= 6
    assert losses[0] == losses[1]


def tiny_rte_run(data: Path, encoder: Path, tmp_path: Path, *overrides: str
                 ) -> tuple[dict, list[tuple[int, int]]]:
    """40 RTE examples (train = dev), batch 20, the tiny encoder: summary and eval points."""
    from conftest import head_jsonl

    rows = head_jsonl(data / "rte/dev.jsonl", tmp_path / "rte.jsonl", 40)
    summary = train(resolve_config(None, [
        "tasks=[rte]", f"tasks.rte.train={rows}", f"tasks.rte.dev={rows}", f"encoder={encoder}",
        "batch_size=20", "progress_bar=false", f"output_dir={tmp_path / 'run'}",
        f"cache_dir={tmp_path / 'cache'}", *overrides]))
    evals = [(e["step"], e["epoch"]) for e in read_metrics(tmp_path / "run")
             if e["kind"] == "eval"]
    return summary, evals


def test_evaluation_at_the_end_only(prepared_data: Path, tiny_encoder_dir: Path,
                                    tmp_path: Path) -> None:
    summary, evals = tiny_rte_run(prepared_data, tiny_encoder_dir, tmp_path, "epochs=3",
                                  "eval_every_epoch=false")
    assert evals == [(6, 3)]
    assert summary["last"]["step"] == 6 and summary["best"]["step"] == 6
    saved = json.loads((tmp_path / "run/last/checkpoint.json").read_text())
    assert saved["step"] == 6 and saved["metrics"] == summary["last"]["metrics"]


def test_epochs_are_counted_and_evaluated(prepared_data: Path, tiny_encoder_dir: Path,
                                          tmp_path: Path) -> None:
    summary, evals = tiny_rte_run(prepared_data, tiny_encoder_dir, tmp_path, "epochs=2")
    assert evals == [(2, 1), (4, 2)]
    assert summary["steps"] == 4
    # 80 examples trained; the rate excludes the two evaluations and checkpoints
    assert summary["train_examples_per_s"] == pytest.approx(80 / summary["train_seconds"], rel=0.01)
    assert summary["train_seconds"] > 0


def test_max_eval_examples_scores_the_first_rows_of_each_dev_set(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import mtdnn.training.checkpointing

    # the data lines come before the run's log
    caplog.set_level("INFO", logger="mtdnn.data.tokenized")

    scored = []
    real_evaluate = mtdnn.training.checkpointing.evaluate_tasks

    def recording_evaluate(model, data, *args, **kwargs):
        scored.append(list(data["rte"].dev.dataset["uid"]))
        return real_evaluate(model, data, *args, **kwargs)

    monkeypatch.setattr(mtdnn.training.checkpointing, "evaluate_tasks", recording_evaluate)
    summary, _ = tiny_rte_run(prepared_data, tiny_encoder_dir, tmp_path, "epochs=1",
                              "max_eval_examples=7")
    rows = [json.loads(line) for line in (tmp_path / "rte.jsonl").read_text().splitlines()]
    assert scored == [[str(row["uid"]) for row in rows[:7]]]
    assert round(summary["last"]["metrics"]["rte"]["accuracy"] * 7, 6).is_integer()
    assert "rte: scoring the first 7 of its 40 dev examples (max_eval_examples)" in caplog.text
    # called from Python with logging not set up, the run's log still has the run's lines;
    # the package's level is put back when the run ends
    log = (tmp_path / "run/train.log").read_text()
    assert "INFO step 2 epoch 1 dev {\"rte\": {\"accuracy\"" in log
    assert logging.getLogger("mtdnn").level == logging.NOTSET
    assert "max_eval_examples: 7" in (tmp_path / "run/config.yaml").read_text()


def record_saves(monkeypatch) -> list[dict]:
    """The checkpoint info (step, metrics, ...) of every save the trainer makes, in order."""
    import mtdnn.training.checkpointing

    saves = []
    real_save = mtdnn.training.checkpointing.save_last

    def recording_save(run, *args, **kwargs):
        saves.append(args[3])
        return real_save(run, *args, **kwargs)

    monkeypatch.setattr(mtdnn.training.checkpointing, "save_last", recording_save)
    return saves


def test_save_every_steps_saves_without_evaluating(prepared_data: Path, tiny_encoder_dir: Path,
                                                  tmp_path: Path, monkeypatch) -> None:
    saves = record_saves(monkeypatch)
    summary, evals = tiny_rte_run(prepared_data, tiny_encoder_dir, tmp_path, "batch_size=10",
                                  "epochs=1", "eval_every_epoch=false", "save_every_steps=3")
    # step 3 saved unevaluated; the end evaluated
    assert [(s["step"], s["metrics"] is None) for s in saves] == [(3, True), (4, False)]
    assert evals == [(4, 1)]
    assert summary["steps"] == 4


def test_periodic_steps_on_an_epoch_end_save_and_evaluate_once(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path, monkeypatch) -> None:
    saves = record_saves(monkeypatch)
    # 4 steps per epoch: steps 2 and 6 are mid-epoch, 4 and 8 end an epoch.
    (tmp_path / "save").mkdir()
    (tmp_path / "eval").mkdir()
    _, evals = tiny_rte_run(prepared_data, tiny_encoder_dir, tmp_path / "save",
                            "batch_size=10", "epochs=2", "eval_every_epoch=false",
                            "save_every_steps=2")
    assert [s["step"] for s in saves] == [2, 4, 6, 8]
    assert evals == [(8, 2)]
    saves.clear()
    _, evals = tiny_rte_run(prepared_data, tiny_encoder_dir, tmp_path / "eval",
                            "batch_size=10", "epochs=2", "eval_every_epoch=false",
                            "eval_every_steps=2")
    assert evals == [(2, 0), (4, 1), (6, 1), (8, 2)]
    assert [s["step"] for s in saves] == [2, 4, 6, 8]


def test_one_rule_decides_when_to_save_and_evaluate() -> None:
    from mtdnn.config.resolve import resolve_config

    config = resolve_config(None, ["tasks=[rte]", "eval_every_steps=4", "save_every_steps=3",
                                "eval_every_epoch=false"])
    plan = {step: config.checkpoint_due(step, 10, epoch_end=step == 5) for step in range(1, 11)}
    assert [s for s, (save, _) in plan.items() if save] == [3, 4, 5, 6, 8, 9, 10]
    assert [s for s, (_, evaluate) in plan.items() if evaluate] == [4, 8, 10]
    every_epoch = resolve_config(None, ["tasks=[rte]"])
    assert every_epoch.checkpoint_due(5, 10, epoch_end=True) == (True, True)
    assert every_epoch.checkpoint_due(6, 10, epoch_end=False) == (False, False)


def test_train_log_holds_every_line_the_run_printed(prepared_data: Path, tiny_encoder_dir: Path,
                                                    tmp_path: Path) -> None:
    """The device and precision, the data counts and where the weights come from are logged
    before the run folder exists; train.log has them too, after the resolved config."""
    import subprocess
    import sys

    rows = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "rte.jsonl", 16)
    stage = tmp_path / "stage"
    common = ["tasks=[rte]", f"tasks.rte.train={rows}", f"tasks.rte.dev={rows}",
              f"encoder={tiny_encoder_dir}", "max_steps=2", "batch_size=8",
              "progress_bar=false", f"cache_dir={tmp_path / 'cache'}"]
    first = subprocess.run([sys.executable, "train.py", *common, f"output_dir={stage}"],
                           cwd=REPO, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "train.py", *common, f"output_dir={run}",
                           f"init_checkpoint={stage}/best"], cwd=REPO, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = [line.split(" ", 1)[1] for line in done.stderr.splitlines()
               if line[:2].isdigit() and " INFO " in line]
    logged = [line.split(" ", 2)[2] for line in (run / "train.log").read_text().splitlines()
              if line[:4].isdigit() and " INFO " in line]
    assert printed and printed == logged
    assert any(line.startswith("INFO device ") for line in logged)
    assert any(line.startswith(f"INFO initialised from {stage}/best") for line in logged)
    assert any(f"run {run}: tasks rte; from {stage}/best;" in line for line in logged)


def test_stage_two_on_an_inline_task_needs_only_its_name(prepared_data: Path,
                                                         tiny_encoder_dir: Path,
                                                         tmp_path: Path) -> None:
    """A task defined inline in stage 1, on the user's own CSV, fine-tuned from the stage's
    checkpoint with init_checkpoint and tasks alone: the checkpoint brings its definition
    and the data it was declared with."""
    import csv
    import subprocess
    import sys

    from mtdnn.files import read_jsonl

    rows = [row for _, row in read_jsonl(prepared_data / "sst2/train.jsonl")][:24]
    mine = tmp_path / "reviews.csv"
    with open(mine, "w", newline="") as handle:
        csv.writer(handle).writerows([("text", "stars")] + [
            (r["sentence"], "pos" if r["label"] == "1" else "neg") for r in rows])
    stage = tmp_path / "stage"
    first = subprocess.run([
        sys.executable, "train.py", "tasks=[sentiment]", f"tasks.sentiment.train={mine}",
        f"tasks.sentiment.dev={mine}", "tasks.sentiment.columns={sentence: text, label: stars}",
        "tasks.sentiment.definition={type: classification, inputs: [sentence], "
        "labels: [neg, pos]}", f"encoder={tiny_encoder_dir}", "max_steps=2", "batch_size=8",
        "progress_bar=false", f"cache_dir={tmp_path / 'cache'}", f"output_dir={stage}"],
        cwd=REPO, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    second = subprocess.run([sys.executable, "train.py", "tasks=[sentiment]",
                             f"init_checkpoint={stage}/best", "max_steps=2", "batch_size=8",
                             "progress_bar=false", f"cache_dir={tmp_path / 'cache'}",
                             f"output_dir={tmp_path / 'fine'}"], cwd=REPO, capture_output=True,
                            text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"initialised from {stage}/best: encoder, heads of sentiment" in second.stderr
    assert f"from {stage}/best;" in second.stderr  # the run line names where it starts
    assert "sentiment" in json.loads((tmp_path / "fine/summary.json").read_text())["best"][
        "metrics"]
