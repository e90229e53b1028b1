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


@pytest.fixture(scope="module")
def sentence_and_pair_heads(prepared_data: Path, tiny_encoder_dir: Path,
                            tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint with a one-text head (SST-2) and a pair head (RTE)."""
    from mtdnn import train

    run = tmp_path_factory.mktemp("two_inputs") / "run"
    tasks = {task: {"train": str(head_jsonl(prepared_data / task / "train.jsonl",
                                            run.parent / f"{task}.jsonl", 16))}
             for task in ("sst2", "rte")}
    for task in tasks:
        tasks[task]["dev"] = tasks[task]["train"]
    train({"tasks": tasks}, encoder=str(tiny_encoder_dir), max_steps=2, batch_size=4,
          max_seq_len=32, output_dir=str(run), progress_bar=False,
          cache_dir=str(run.parent / "cache"))
    return run / "best"


def test_predictor_answers_a_sentence_head_and_a_pair_head_in_one_call(
        sentence_and_pair_heads: Path) -> None:
    from mtdnn import Predictor

    predictor = Predictor(sentence_and_pair_heads, precision="fp32", device="cpu")
    calls = []
    predictor.model.encoder.register_forward_hook(lambda *args: calls.append(1))
    records = [{"sentence": "A fine film.", "sentence1": a, "sentence2": b} for a, b in PAIRS]
    both = predictor.predict(records, tasks=["sst2", "rte"])
    assert len(calls) == 2  # one pass per group of heads that read the same fields
    assert [sorted(r) for r in both] == [["rte", "sst2"]] * 2
    alone_sst2 = predictor.predict(["A fine film."] * 2, tasks=["sst2"])
    alone_rte = predictor.predict(PAIRS, tasks=["rte"])
    for mixed, one, pair in zip(both, alone_sst2, alone_rte, strict=True):
        assert mixed["sst2"]["probabilities"] == pytest.approx(one["sst2"]["probabilities"],
                                                               abs=1e-5)
        assert mixed["rte"]["probabilities"] == pytest.approx(pair["rte"]["probabilities"],
                                                              abs=1e-5)
    # default tasks for records: every head whose fields the record has
    assert sorted(predictor.predict(records[:1])[0]) == ["rte", "sst2"]
    assert sorted(predictor.predict(["Just one text."])[0]) == ["sst2"]


def test_predictor_takes_numpy_and_pandas_and_refuses_bad_input_clearly(
        sentence_and_pair_heads: Path) -> None:
    import pandas as pd

    from mtdnn import Predictor
    from mtdnn.errors import MtdnnError

    predictor = Predictor(sentence_and_pair_heads, precision="fp32")
    expected = predictor.predict(PAIRS, tasks=["rte"])
    frame = pd.DataFrame({"sentence1": [a for a, _ in PAIRS], "sentence2": [b for _, b in PAIRS]})
    for given in (np.array(PAIRS), frame, pd.Series(list(PAIRS))):
        got = predictor.predict(given, tasks=["rte"])
        for one, want in zip(got, expected, strict=True):
            assert one["rte"]["probabilities"] == pytest.approx(want["rte"]["probabilities"],
                                                                abs=1e-5)
    bad = {
        "example 1: 'sentence2' is None (NoneType), not text": [PAIRS[0], ("A.", None)],
        "example 0 is 3 (int)": [3],
        "example 0 is None (NoneType)": [None],
        "example 0: 'sentence1' is empty": [("  ", "B.")],
        "examples is one string": "A text.",
        "example 0 has no field 'sentence2'": [{"sentence1": "A."}],
        "example 0 has 3 text(s), a task reads 2": [("A.", "B.", "C.")],
    }
    for message, examples in bad.items():
        tasks = ["sst2"] if "'sentence'" in message or "(int)" in message else ["rte"]
        with pytest.raises(MtdnnError, match=message.replace("(", r"\(").replace(")", r"\)")):
            predictor.predict(examples, tasks=tasks)
    for size in (0, -1, 2.5, True):
        with pytest.raises(MtdnnError, match="batch_size .* is not a positive whole number"):
            Predictor(sentence_and_pair_heads, batch_size=size)
    with pytest.raises(MtdnnError, match="unknown device"):
        Predictor(sentence_and_pair_heads, device="tpu")


def test_prediction_reads_what_training_reads_and_writes_csv(
        sentence_and_pair_heads: Path, tmp_path: Path) -> None:
    """A CSV with other column names, as training takes it, through mtdnn-predict and
    Predictor.predict_file; CSV out, the same probabilities as Predictor.predict."""
    import csv

    from mtdnn import Predictor
    from mtdnn.cli import predict_main

    source = tmp_path / "mine.csv"
    source.write_text("premise,hypothesis\n" + "".join(f'"{a}","{b}"\n' for a, b in PAIRS))
    predictor = Predictor(sentence_and_pair_heads, precision="fp32")
    expected = predictor.predict(PAIRS, tasks=["rte"])
    out = tmp_path / "predictions.csv"
    predict_main(["--checkpoint", str(sentence_and_pair_heads), "--task", "rte", "--input",
                  str(source), "--columns", "{sentence1: premise, sentence2: hypothesis}",
                  "--output", str(out), "--precision", "fp32", "--no-progress"])
    rows = list(csv.DictReader(out.open()))
    assert [row["uid"] for row in rows] == ["row2", "row3"]
    for row, want in zip(rows, expected, strict=True):
        assert row["prediction"] == want["rte"]["prediction"]
        for label, p in want["rte"]["probabilities"].items():
            assert float(row[f"p({label})"]) == pytest.approx(p, abs=1e-5)
    jsonl = tmp_path / "predictions.jsonl"
    result = predictor.predict_file(source, jsonl, tasks=["rte"],
                                    columns={"sentence1": "premise", "sentence2": "hypothesis"})
    assert result["examples"] == 2
    written = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [w["prediction"] for w in written] == [r["prediction"] for r in rows]
