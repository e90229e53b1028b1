"""The domain-adaptation sweep on tiny subsets with the 2-layer encoder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO, head_jsonl, run_module


def test_sweep_writes_results_and_skips_finished_cells(prepared_data: Path, stage_one: Path,
                                                      tmp_path: Path) -> None:
    data = tmp_path / "data"
    for task in ("scitail", "snli"):
        (data / task).mkdir(parents=True)
        head_jsonl(prepared_data / task / "train.jsonl", data / task / "train.jsonl", 100)
        head_jsonl(prepared_data / task / "dev.jsonl", data / task / "dev.jsonl", 24)
        run_module("data_prep", "subsets", "--data-dir", str(data), "--task", task,
                   "--count", "8", "500", "--seed", "13")
    config = {
        "tasks": ["scitail", "snli"], "subsets": ["n8", "n500"], "seeds": [1, 2],
        # the long form of a start point: a checkpoint plus training keys of its own
        "start_points": {"encoder": None, "mt": {"init": str(stage_one / "best"),
                                                 "train": {"optimizer": {"lr": 1e-4}}}},
        "data_dir": str(data), "output_dir": str(tmp_path / "sweep"),
        # min_steps: the 8-row subset is one batch, one epoch would be a single update
        "train": {"epochs": 1, "min_steps": 2, "batch_size": 8, "encoder_layers": 2,
                  "max_seq_len": 64, "progress_bar": False, "cache_dir": str(tmp_path / "cache")},
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "mtdnn.sweep", "--config", str(tmp_path / "sweep.yaml")]
    first = subprocess.run(command, cwd=REPO, text=True, capture_output=True)
    assert first.returncode == 0, first.stderr[-3000:]

    out = tmp_path / "sweep"
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0].startswith("start_point,task,subset,train_size,seed,accuracy")
    assert len(rows) == 1 + 2 * 2 * 2  # 2 start points × 2 tasks × 1 available size × 2 seeds
    table = (out / "results.md").read_text()
    assert "| #Training Data | 8 | 500 |" in table
    assert table.count("n/a (train file has 100 rows)") == 4
    assert "| mt | " in table and " ± " in table
    png = (out / "results.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000

    encoder_run = yaml.safe_load((out / "encoder/snli/n8/seed1/config.yaml").read_text())
    mt_run = yaml.safe_load((out / "mt/snli/n8/seed1/config.yaml").read_text())
    assert (encoder_run["optimizer"]["lr"], mt_run["optimizer"]["lr"]) == (5e-5, 1e-4)
    assert mt_run["init_checkpoint"] == str(stage_one / "best")
    assert mt_run["optimizer"]["weight_decay"] == encoder_run["optimizer"]["weight_decay"]

    results = sorted(out.glob("*/*/*/*/result.json"))
    assert len(results) == 8
    stamps = [p.stat().st_mtime_ns for p in results]
    second = subprocess.run(command, cwd=REPO, text=True, capture_output=True)
    assert second.returncode == 0, second.stderr[-3000:]
    assert " cell " not in second.stderr  # nothing trained again
    assert [p.stat().st_mtime_ns for p in results] == stamps
    first_result = json.loads(results[0].read_text())
    assert set(first_result) >= {"start_point", "task", "subset", "train_size", "seed",
                                 "metrics", "wall_seconds", "train_keys"}
    assert {json.loads(p.read_text())["steps"] for p in results} == {2}
    assert first_result["train_keys"]["min_steps"] == 2
    assert "progress_bar" not in first_result["train_keys"]

    # Cells trained under other training keys are an error, in a run and in a report.
    for extra in ([], ["--report-only"]):
        other = subprocess.run([*command, *extra, "train.optimizer.lr=1e-3"], cwd=REPO,
                               text=True, capture_output=True)
        assert other.returncode == 2, other.stderr[-3000:]
        assert "train.optimizer" in other.stderr and "result.json" in other.stderr
        assert "Traceback" not in other.stderr
    assert [p.stat().st_mtime_ns for p in results] == stamps

    # A size cap shows the larger subsets as not run, and trains nothing.
    capped = subprocess.run([*command, "max_train_rows=4"], cwd=REPO, text=True,
                            capture_output=True)
    assert capped.returncode == 0, capped.stderr[-3000:]
    assert " cell " not in capped.stderr
    assert "n/a (not run: 8 rows > max_train_rows 4)" in (out / "results.md").read_text()

    # Finished cells of a start point whose weights changed are an error, not a silent mix.
    from safetensors.torch import load_file, save_file

    changed = tmp_path / "changed"
    shutil.copytree(stage_one / "best", changed)
    heads = load_file(changed / "heads.safetensors")
    first_key = sorted(heads)[0]
    heads[first_key] = heads[first_key] + 1.0
    save_file(heads, changed / "heads.safetensors")
    stale = subprocess.run([*command, f"start_points.mt.init={changed}"], cwd=REPO, text=True,
                           capture_output=True)
    assert stale.returncode == 2
    assert "start_points.mt" in stale.stderr and "start weights" in stale.stderr
    assert "Traceback" not in stale.stderr
    assert [p.stat().st_mtime_ns for p in results] == stamps

    # --report-only writes the tables from the finished cells and trains nothing.
    report = subprocess.run([*command, "--report-only", "seeds=[1,2,3]"], cwd=REPO, text=True,
                            capture_output=True)
    assert report.returncode == 0, report.stderr[-3000:]
    assert " cell " not in report.stderr and "8 cells finished" in report.stdout
    assert not list(out.glob("*/*/*/seed3"))


def test_differences_table_gives_welch_p_per_pair_of_start_points() -> None:
    from scipy import stats

    from mtdnn.sweep import differences_table, load_sweep_config

    config = load_sweep_config(None, ["tasks=[scitail]", "subsets=[1pct,10pct,100pct]",
                                      "start_points={encoder: null, mt: null, smart: null}"])
    manifests = {"scitail": {"1pct": {"available": True}, "10pct": {"available": True},
                             "100pct": {"available": False}}}
    accuracies = {("encoder", "1pct"): [0.70, 0.72, 0.71], ("mt", "1pct"): [0.80, 0.83, 0.81],
                  ("smart", "1pct"): [0.81, 0.83, 0.82], ("encoder", "10pct"): [0.85, 0.85],
                  ("mt", "10pct"): [0.90]}
    rows = [{"task": "scitail", "subset": subset, "start_point": start,
             "metrics": {"accuracy": value}}
            for (start, subset), values in accuracies.items() for value in values]
    table = differences_table(config, manifests, rows).splitlines()
    by_pair = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in table
               if " − " in line}
    assert list(by_pair) == ["mt − encoder", "smart − encoder", "smart − mt"]
    p = stats.ttest_ind([80, 83, 81], [70, 72, 71], equal_var=False).pvalue
    assert by_pair["mt − encoder"][0] == f"+10.3 (p = {p:.3f})"
    assert by_pair["mt − encoder"][1] == "+5.0 (no p: 1 seed)"
    assert by_pair["smart − encoder"][1] == "not run"
    assert by_pair["smart − mt"][0].startswith("+0.7 (p = 0.")
    assert all(cells[2].rstrip(" |") == "n/a" for cells in by_pair.values())


def test_a_claimed_cell_is_left_to_its_worker_and_a_dead_workers_claim_is_taken(
        tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from mtdnn.sweep import claimed

    cell = tmp_path / "cell"
    with claimed(cell) as first:
        with claimed(cell) as second:
            assert first and not second  # a live worker (this process) holds it
    assert not (cell / ".claim").exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (cell / ".claim").write_text(dead)
    with claimed(cell) as taken:
        assert taken and (cell / ".claim").read_text() == str(os.getpid())
