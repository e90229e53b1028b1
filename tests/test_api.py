"""The Python API (``from mtdnn import train, Predictor``) and several heads per prediction."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, head_jsonl

PAIRS = [("A man is playing a guitar on stage.", "A man is performing music."),
         ("The cat sleeps.", "A dog is barking loudly at the mailman.")]


def test_predictor_runs_the_encoder_once_for_every_requested_head(stage_one: Path,
                                                                   tmp_path: Path) -> None:
    from mtdnn import Predictor

    predictor = Predictor(stage_one / "best", precision="fp32")
    calls = []
    predictor.model.encoder.register_forward_hook(lambda *args: calls.append(1))
    both = predictor.predict(PAIRS, tasks=["rte", "mrpc"])
    assert len(calls) == 1  # one batch, one encoder pass, two heads
    assert [sorted(r) for r in both] == [["mrpc", "rte"]] * 2
    for result in both:
        assert result["rte"]["prediction"] in ("entailment", "not_entailment")
        assert sum(result["mrpc"]["probabilities"].values()) == pytest.approx(1, abs=1e-5)
    # the same numbers as one head at a time, and as mappings of the task's fields
    alone = predictor.predict([{"sentence1": a, "sentence2": b} for a, b in PAIRS],
                              tasks=["mrpc"])
    for one, pair in zip(alone, both, strict=True):
        assert one["mrpc"]["probabilities"] == pytest.approx(pair["mrpc"]["probabilities"],
                                                             abs=1e-5)
    # default: every head that reads a pair
    assert set(predictor.predict(PAIRS[:1])[0]) == {"rte", "mrpc", "scitail"}

    from mtdnn.errors import MtdnnError

    with pytest.raises(MtdnnError, match="task 'cola' is not in this checkpoint"):
        predictor.predict(PAIRS, tasks=["cola"])
    with pytest.raises(MtdnnError, match="example 1 has 1 text"):
        predictor.predict([PAIRS[0], ("only one",)], tasks=["rte"])


def test_predict_with_several_tasks_writes_each_heads_prediction(
        stage_one: Path, small_tasks: list[str], tmp_path: Path) -> None:
    dev = Path(next(o for o in small_tasks if o.startswith("tasks.rte.dev=")).split("=", 1)[1])
    sample = head_jsonl(dev, tmp_path / "rte.jsonl", 12)

    def predict(out: Path, *tasks: str) -> list[dict]:
        result = subprocess.run([sys.executable, "predict.py", "--no-progress", "--checkpoint",
                                 str(stage_one / "best"), *[a for t in tasks
                                                            for a in ("--task", t)],
                                 "--input", str(sample), "--output", str(out),
                                 "--precision", "fp32"],
                                cwd=REPO, text=True, capture_output=True)
        assert result.returncode == 0, result.stderr[-3000:]
        return [json.loads(line) for line in out.read_text().splitlines()]

    both = predict(tmp_path / "both.jsonl", "rte", "mrpc")
    rte = predict(tmp_path / "rte_only.jsonl", "rte")
    assert [r["uid"] for r in both] == [r["uid"] for r in rte]
    for pair, one in zip(both, rte, strict=True):
        assert pair["rte"]["prediction"] == one["prediction"]
        assert np.allclose(list(pair["rte"]["probabilities"].values()),
                           list(one["probabilities"].values()), atol=1e-5)
        assert set(pair["mrpc"]["probabilities"]) == {"0", "1"}
    assert not (tmp_path / "both.jsonl.metrics.json").exists()  # one label, two tasks


def test_train_from_python_takes_a_path_and_keyword_keys(prepared_data: Path,
                                                         tiny_encoder_dir: Path,
                                                         tmp_path: Path) -> None:
    from mtdnn import train

    files = {split: str(head_jsonl(prepared_data / "rte" / f"{split}.jsonl",
                                   tmp_path / f"{split}.jsonl", 16)) for split in ("train", "dev")}
    summary = train(str(REPO / "tests/fixtures/smoke.yaml"), tasks={"rte": files},
                    encoder=str(tiny_encoder_dir), max_steps=2, eval_every_steps=2,
                    optimizer={"lr": 1e-4}, output_dir=str(tmp_path / "run"),
                    cache_dir=str(tmp_path / "cache"), progress_bar=False)
    assert summary["steps"] == 2 and set(summary["best"]["metrics"]) == {"rte"}
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "lr: 0.0001" in saved and "max_seq_len: 64" in saved  # the file's, then ours

    from mtdnn.errors import MtdnnError

    with pytest.raises(MtdnnError, match="optimizer.lrr"):
        train({"tasks": ["rte"]}, optimizer={"lrr": 1})


def test_early_stopping_ends_a_run_without_progress_and_reporters_are_checked(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    from mtdnn import train
    from mtdnn.errors import MtdnnError

    files = {split: str(head_jsonl(prepared_data / "rte" / f"{split}.jsonl",
                                   tmp_path / f"{split}.jsonl", 16)) for split in ("train", "dev")}
    common = {"tasks": {"rte": files}, "encoder": str(tiny_encoder_dir), "batch_size": 8,
              "max_seq_len": 32, "cache_dir": str(tmp_path / "cache"), "progress_bar": False}
    # a learning rate too small to change a prediction: the first evaluation stays best
    summary = train(common, max_steps=10, eval_every_steps=1, early_stopping_patience=2,
                    optimizer={"lr": 1e-12}, output_dir=str(tmp_path / "run"))
    assert summary["stopped_early"] and summary["steps"] == 3
    assert summary["best"]["step"] == 1
    assert list((tmp_path / "run" / "tensorboard").iterdir())  # report_to's default
    with pytest.raises(MtdnnError, match="report_to names 'wandb', which is not installed"):
        train(common, max_steps=2, report_to=["wandb"], output_dir=str(tmp_path / "run2"))
    assert not (tmp_path / "run2").exists()
