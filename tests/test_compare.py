"""python -m mtdnn.compare: arms × seeds of multi-task runs, resumable, one table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO


def small_train_keys(small_tasks: list[str], tmp_path: Path) -> dict:
    """The smoke run's task files as a nested mapping (RTE + MRPC, 2-layer encoder)."""
    keys: dict = {"tasks": {"rte": {}, "mrpc": {}}, "encoder_layers": 2, "max_steps": 4,
                  "batch_size": 4, "max_seq_len": 64, "progress_bar": False}
    for override in small_tasks:
        key, value = override.split("=", 1)
        if key.startswith("tasks.scitail"):
            continue
        node = keys
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return keys


def test_compare_runs_each_arm_and_seed_once(small_tasks: list[str], tmp_path: Path) -> None:
    config = {"seeds": [1, 2], "output_dir": str(tmp_path / "cmp"),
              "train": small_train_keys(small_tasks, tmp_path),
              "arms": {"proportional": {}, "cycle+pcgrad": {"sampler": {"kind": "cycle"},
                                                            "pcgrad": True}}}
    (tmp_path / "cmp.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = [sys.executable, "-m", "mtdnn.compare", "--config", str(tmp_path / "cmp.yaml")]
    first = subprocess.run(command, cwd=REPO, text=True, capture_output=True)
    assert first.returncode == 0, first.stderr[-3000:]

    out = tmp_path / "cmp"
    saved = yaml.safe_load((out / "cycle+pcgrad/seed2/config.yaml").read_text())
    assert saved["sampler"]["kind"] == "cycle" and saved["pcgrad"] is True
    assert saved["seed"] == 2 and saved["max_steps"] == 4
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0] == "arm,seed,task,metric,value,steps,wall_seconds"
    # 2 arms × 2 seeds × (rte accuracy, mrpc accuracy, mrpc f1)
    assert len(rows) == 1 + 2 * 2 * 3
    table = (out / "results.md").read_text().splitlines()
    assert table[0] == "| arm | mrpc accuracy | mrpc f1 | rte accuracy | mean |"
    assert table[2].startswith("| proportional | ") and table[3].startswith("| cycle+pcgrad |")
    assert table[2].count(" ± ") == 4, table
    result = json.loads((out / "proportional/seed1/result.json").read_text())
    assert result["steps"] == 4 and result["train_examples_per_s"] > 0

    stamps = [p.stat().st_mtime_ns for p in sorted(out.glob("*/*/result.json"))]
    second = subprocess.run(command, cwd=REPO, text=True, capture_output=True)
    assert second.returncode == 0, second.stderr[-3000:]
    assert " run " not in second.stderr  # nothing trained again
    assert [p.stat().st_mtime_ns for p in sorted(out.glob("*/*/result.json"))] == stamps

    # --report-only: tables from the finished runs; an arm with none shows as not run.
    config["arms"]["uniform"] = {"sampler": {"kind": "uniform"}}
    (tmp_path / "cmp.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    report = subprocess.run([*command, "--report-only"], cwd=REPO, text=True,
                            capture_output=True)
    assert report.returncode == 0, report.stderr[-3000:]
    assert " run " not in report.stderr and not (out / "uniform").exists()
    assert "| uniform | not run | not run | not run | not run |" in report.stdout
    assert "4 of 6 runs finished" in report.stdout
