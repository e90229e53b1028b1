"""experiments/glue_comparison.py: its report from run records, and its stage-1 guard."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

SCRIPT = REPO / "experiments" / "glue_comparison.py"


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def comparison(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, text=True,
                          capture_output=True)


def test_report_has_every_task_and_counts_seeds(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    write_json(out / "stage1" / "seed13" / "result.json",
               {"metrics": {"rte": {"accuracy": 0.5}, "mnli": {"accuracy": 0.586}},
                "weights_fingerprint": "x"})
    for seed, accuracy in ((13, 0.60), (14, 0.62)):
        write_json(out / "mt-dnn" / "mnli" / f"seed{seed}" / "result.json",
                   {"metrics": {"accuracy": accuracy}})
    write_json(out / "single" / "mnli" / "seed13" / "result.json", {"metrics": {"accuracy": 0.55}})

    # A worker's --seeds limit what it runs, not what the shared report holds.
    report = comparison("--out", str(out), "--report-only", "--seeds", "14")
    assert report.returncode == 0, report.stderr[-3000:]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")
            for line in (out / "results.md").read_text().splitlines()}
    assert rows["start point"][-1].startswith("MNLI accuracy")
    assert rows["mt-dnn stage 1 (no fine-tuning)"][-1].startswith("58.6")
    assert rows["mt-dnn"][-1].startswith("61.0 ± 1.4 (n=2)")
    assert rows["single"][-1].startswith("55.0 (n=1)")
    assert rows["hf-trainer"][-1].startswith("—")
    assert len((out / "results.csv").read_text().splitlines()) == 1 + 2 + 3

    missing = comparison("--out", str(tmp_path / "nothing"), "--report-only")
    assert missing.returncode == 2 and "no comparison here" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_stage_one_with_other_weights_than_the_finished_runs_is_an_error(
        stage_one: Path, tmp_path: Path) -> None:
    out, data = tmp_path / "cmp", tmp_path / "data"
    stage = out / "stage1" / "seed13"
    shutil.copytree(stage_one / "last", stage / "last")
    (stage / "summary.json").write_text("{}")
    record = {"metrics": {}, "weights_fingerprint": "0" * 64}
    write_json(stage / "result.json", record)
    write_json(data / "manifest.json", {})  # data prepared, SST-2 subset drawn: nothing to do
    subset = data / "sst2" / "subsets" / "seed13" / "n2000.jsonl"
    subset.parent.mkdir(parents=True)
    subset.touch()

    run = comparison("--out", str(out), "--data-dir", str(data), "--tasks", "rte",
                     "--arms", "mt-dnn", "--seeds", "13")
    assert run.returncode == 2, run.stderr[-3000:]
    assert "stage 1" in run.stderr and str(stage / "result.json") in run.stderr
    assert "Traceback" not in run.stderr
    assert not (out / "mt-dnn").exists()  # nothing fine-tuned from the wrong weights
    assert json.loads((stage / "result.json").read_text()) == record


def test_migration_makes_recorded_commands_machine_independent(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "experiments"))
    from migrate_records import migrate

    record = tmp_path / "arm" / "rte" / "seed13" / "result.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"metrics": {"accuracy": 0.5}, "command":
                                  "/work/x/.venv/bin/python train.py 'tasks=[rte]' seed=13"}))
    assert migrate(tmp_path) == [record]
    migrated = json.loads(record.read_text())
    assert migrated == {"metrics": {"accuracy": 0.5},
                        "command": "python train.py 'tasks=[rte]' seed=13"}
    assert migrate(tmp_path) == []  # idempotent
