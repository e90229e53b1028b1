"""predict.py on checkpoints written by a real short training run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, head_jsonl


def predict(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "predict.py", "--no-progress", *map(str, args)],
                            cwd=REPO, text=True, capture_output=True)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr[-3000:])
    return result


def rte_dev(small_tasks: list[str]) -> Path:
    return Path(next(o for o in small_tasks if o.startswith("tasks.rte.dev=")).split("=", 1)[1])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_predict_reproduces_the_logged_dev_metric(stage_one: Path, small_tasks: list[str],
                                                  tmp_path: Path) -> None:
    out = tmp_path / "rte.jsonl"
    result = predict("--checkpoint", stage_one / "best", "--task", "rte", "--input",
                     rte_dev(small_tasks), "--output", out)
    logged = json.loads((stage_one / "best" / "checkpoint.json").read_text())["metrics"]["rte"]
    written = json.loads((tmp_path / "rte.jsonl.metrics.json").read_text())["metrics"]
    assert written == logged
    assert json.dumps({"task": "rte", "metrics": logged}) in result.stdout
    assert "examples/s" in result.stdout
    rows = read_jsonl(out)
    assert len(rows) == 48 and rows[0]["uid"] == "rte-dev-0"
    assert rows[0]["prediction"] in ("entailment", "not_entailment")
    assert sum(rows[0]["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)


def test_ensemble_averages_probabilities(stage_one: Path, small_tasks: list[str],
                                         tmp_path: Path) -> None:
    single = {}
    for name in ("best", "last"):
        predict("--checkpoint", stage_one / name, "--task", "mrpc", "--input",
                rte_dev(small_tasks).with_name("mrpc_dev.jsonl"), "--output", tmp_path / name)
        single[name] = [r["probabilities"]["1"] for r in read_jsonl(tmp_path / name)]
    predict("--checkpoint", stage_one / "best", "--checkpoint", stage_one / "last", "--task",
            "mrpc", "--input", rte_dev(small_tasks).with_name("mrpc_dev.jsonl"), "--output",
            tmp_path / "both")
    both = [r["probabilities"]["1"] for r in read_jsonl(tmp_path / "both")]
    np.testing.assert_allclose(both, (np.array(single["best"]) + single["last"]) / 2, atol=2e-6)


def test_glue_submission_format(stage_one: Path, prepared_data: Path, tmp_path: Path) -> None:
    test_file = head_jsonl(prepared_data / "rte" / "test.jsonl", tmp_path / "test.jsonl", 5)
    predict("--checkpoint", stage_one / "best", "--task", "rte", "--input", test_file,
            "--output", tmp_path / "RTE.tsv", "--format", "glue")
    lines = (tmp_path / "RTE.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 6
    assert [line.split("\t")[0] for line in lines[1:]] == ["0", "1", "2", "3", "4"]
    assert not (tmp_path / "RTE.tsv.metrics.json").exists()  # unlabelled input


def test_errors_leave_no_output(stage_one: Path, small_tasks: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    bad_fields = tmp_path / "fields.jsonl"
    bad_fields.write_text('{"uid": "a", "premise": "P.", "hypothesis": "H."}\n')
    bad_label = tmp_path / "label.jsonl"
    bad_label.write_text('{"uid": "a", "sentence1": "P.", "sentence2": "H.", "label": "maybe"}\n')
    cases = [
        (["--task", "sst2", "--input", rte_dev(small_tasks)],
         "key '--task': task 'sst2' is not in this checkpoint (allowed: rte, mrpc, scitail)"),
        (["--task", "rte", "--input", bad_fields],
         f"{bad_fields}:1: task 'rte': field 'sentence1' is missing or empty"),
        (["--task", "rte", "--input", bad_label],
         f"{bad_label}:1: task 'rte': label 'maybe' is not one of the task's labels"),
        (["--task", "rte", "--input", tmp_path / "missing.jsonl"], "data file not found"),
    ]
    for args, words in cases:
        result = predict("--checkpoint", stage_one / "best", *args, "--output", out, check=False)
        assert result.returncode == 2, result.stderr
        assert words in result.stderr and "Traceback" not in result.stderr
        assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))
    result = predict("--checkpoint", tmp_path / "nope", "--task", "rte", "--input",
                     rte_dev(small_tasks), "--output", out, check=False)
    assert result.returncode == 2 and "checkpoint folder not found" in result.stderr


def test_a_bad_argument_or_input_is_reported_before_torch_or_a_model_loads(
        stage_one: Path, tmp_path: Path) -> None:
    """The task, the input file and every row are checked first: the error comes in a
    fraction of the time a model takes to load."""
    bad_label = tmp_path / "label.jsonl"
    bad_label.write_text('{"uid": "a", "sentence1": "P.", "sentence2": "H."}\n'
                         '{"uid": "b", "sentence1": "P.", "sentence2": "H.", "label": "maybe"}\n')
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from mtdnn.errors import MtdnnError\n"
        "from mtdnn.inference.predictor import predict_file\n"
        f"for task, source in (('sst2', {str(bad_label)!r}), ('rte', {str(bad_label)!r}),\n"
        f"                     ('rte', {str(tmp_path / 'missing.jsonl')!r})):\n"
        "    try:\n"
        f"        predict_file([Path({str(stage_one / 'best')!r})], task, source,\n"
        f"                     Path({str(tmp_path / 'out.jsonl')!r}))\n"
        "    except MtdnnError as error:\n"
        "        print(error)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))\n")
    ran = subprocess.run([sys.executable, "-c", script], cwd=REPO, text=True,
                         capture_output=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    *errors, loaded = ran.stdout.strip().splitlines()
    assert "task 'sst2' is not in this checkpoint" in errors[0]
    assert f"{bad_label}:2: task 'rte': label 'maybe'" in errors[1]  # the second row
    assert "data file not found" in errors[2]
    assert loaded == "[]"
    assert not (tmp_path / "out.jsonl").exists()
