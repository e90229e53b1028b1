"""python -m mtdnn.experiment: grids of arms × tasks × subsets × seeds on tiny data with the
2-layer encoder; stages, the Trainer backend, publishing, and the record migration."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, head_jsonl, run_module


def experiment(config_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtdnn.experiment", "--config",
                           str(config_path), *extra], cwd=REPO, text=True, capture_output=True)


def records(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("result.json") if "stages" not in p.parts)


@pytest.mark.slow
def test_subsets_grid_writes_table_5_skips_finished_runs_and_publishes(
        prepared_data: Path, stage_one: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    for task in ("scitail", "snli"):
        (data / task).mkdir(parents=True)
        head_jsonl(prepared_data / task / "train.jsonl", data / task / "train.jsonl", 100)
        head_jsonl(prepared_data / task / "dev.jsonl", data / task / "dev.jsonl", 24)
        run_module("mtdnn.data_prep", "subsets", "--data-dir", str(data), "--task", task,
                   "--count", "8", "500", "--seed", "13")
    config = {
        "tasks": ["scitail", "snli"], "subsets": ["n8", "n500"], "seeds": [1, 2],
        "layout": "subsets",
        # the long form of an arm: a checkpoint plus training keys of its own
        "arms": {"encoder": None, "mt": {"init": str(stage_one / "best"),
                                         "train": {"optimizer": {"lr": 1e-4}}}},
        "data_dir": str(data), "output_dir": str(tmp_path / "runs"),
        "publish_dir": str(tmp_path / "published"),
        # min_steps: the 8-row subset is one batch, one epoch would be a single update
        "train": {"epochs": 1, "min_steps": 2, "batch_size": 8, "encoder_layers": 2,
                  "max_seq_len": 64, "progress_bar": False, "cache_dir": str(tmp_path / "cache")},
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    first = experiment(path, "--publish")
    assert first.returncode == 0, first.stderr[-3000:]

    out, published = tmp_path / "runs", tmp_path / "published"
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0].startswith("arm,task,subset,train_size,seed,stage_seed,metric_task,metric")
    assert len(rows) == 1 + 2 * 2 * 2  # 2 arms × 2 tasks × 1 available size × 2 seeds
    table = (out / "results.md").read_text()
    assert "| #Training Data | 8 | 500 |" in table
    assert table.count("n/a (train file has 100 rows)") == 4
    assert "| mt | " in table and " ± " in table and "| mt − encoder |" in table
    png = (out / "results.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000

    encoder_run = yaml.safe_load((out / "encoder/snli/n8/seed1/config.yaml").read_text())
    mt_run = yaml.safe_load((out / "mt/snli/n8/seed1/config.yaml").read_text())
    assert (encoder_run["optimizer"]["lr"], mt_run["optimizer"]["lr"]) == (5e-5, 1e-4)
    assert mt_run["init_checkpoint"] == str(stage_one / "best")
    assert mt_run["optimizer"]["weight_decay"] == encoder_run["optimizer"]["weight_decay"]

    results = records(out)
    assert len(results) == 8
    record = json.loads(results[0].read_text())
    assert set(record) >= {"arm", "task", "subset", "train_size", "seed", "metrics",
                           "wall_seconds", "train_keys", "start_fingerprint", "precision"}
    assert set(record["metrics"]) == {record["task"]}
    assert record["evaluations"][-1]["metrics"] == record["metrics"]  # the learning curve
    assert {json.loads(p.read_text())["steps"] for p in results} == {2}
    assert record["train_keys"]["min_steps"] == 2 and "progress_bar" not in record["train_keys"]
    # --publish copied the records and tables, and nothing else (no checkpoints)
    assert [p.relative_to(published) for p in records(published)] == \
        [p.relative_to(out) for p in results]
    assert (published / "results.md").read_text() == table
    assert not list(published.rglob("*.safetensors"))

    stamps = [p.stat().st_mtime_ns for p in results]
    second = experiment(path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert " run Cell" not in second.stderr  # nothing trained again
    assert [p.stat().st_mtime_ns for p in results] == stamps

    # How often a run saves does not change what it learns: its finished runs still count.
    saving = experiment(path, "train.save_every_steps=7")
    assert saving.returncode == 0, saving.stderr[-3000:]
    assert " run Cell" not in saving.stderr

    # Runs trained under other training keys are an error, in a run and in a report.
    for extra in ([], ["--report-only"]):
        other = experiment(path, *extra, "train.optimizer.lr=1e-3")
        assert other.returncode == 2, other.stderr[-3000:]
        assert "train.optimizer" in other.stderr and "result.json" in other.stderr
        assert "Traceback" not in other.stderr
    assert [p.stat().st_mtime_ns for p in results] == stamps

    # A size cap shows the larger subsets as not run, and trains nothing.
    capped = experiment(path, "max_train_rows=4")
    assert capped.returncode == 0, capped.stderr[-3000:]
    assert " run Cell" not in capped.stderr
    assert "n/a (not run: 8 rows > max_train_rows 4)" in (out / "results.md").read_text()

    # Finished runs of an arm whose start weights changed are an error, not a silent mix.
    from safetensors.torch import load_file, save_file

    changed = tmp_path / "changed"
    shutil.copytree(stage_one / "best", changed)
    heads = load_file(changed / "heads.safetensors")
    first_key = sorted(heads)[0]
    heads[first_key] = heads[first_key] + 1.0
    save_file(heads, changed / "heads.safetensors")
    stale = experiment(path, f"arms.mt.init={changed}")
    assert stale.returncode == 2
    assert "arms.mt" in stale.stderr and "start weights" in stale.stderr
    assert "Traceback" not in stale.stderr
    assert [p.stat().st_mtime_ns for p in results] == stamps

    # finished_runs_keep: model deletes what only resuming reads from the grid's finished
    # runs, as the grid starts and as each new run finishes; their final weights stay.
    from mtdnn.runs.checkpoint import weights_fingerprint

    folders = [p.parent for p in results]
    before = [weights_fingerprint(f / "last") for f in folders]
    assert all((f / "last" / "training_state.pt").is_file() and (f / "best").is_dir()
               for f in folders)
    lean = experiment(path, "finished_runs_keep=model", "seeds=[1,2,3]", "tasks=[scitail]",
                      "subsets=[n8]")
    assert lean.returncode == 0, lean.stderr[-3000:]
    assert "GB of resumable state and best checkpoints deleted" in lean.stderr
    assert lean.stderr.count(" run Cell") == 2  # seed 3 of both arms, nothing else
    assert [weights_fingerprint(f / "last") for f in folders] == before
    assert [p.stat().st_mtime_ns for p in results] == stamps
    scitail = [f for f in folders if "scitail" in f.parts]
    for folder in [*scitail, out / "encoder/scitail/n8/seed3", out / "mt/scitail/n8/seed3"]:
        assert (folder / "result.json").is_file() and (folder / "last/heads.safetensors").is_file()
        assert not (folder / "best").exists() and not (folder / "last/training_state.pt").exists()
    # the runs of the grid it ran, not those the override left out
    assert all((f / "best").is_dir() for f in folders if f not in scitail) and len(scitail) == 4

    # A later session has only the published records: they count as finished, and
    # --report-only --publish regenerates the published table byte for byte.
    shutil.rmtree(out)
    # (flags may sit among the overrides)
    report = experiment(path, "seeds=[1,2,3]", "--report-only", f"output_dir={out}",
                        "--publish")
    assert report.returncode == 0, report.stderr[-3000:]
    assert " run Cell" not in report.stderr and "8 of 12 runs finished" in report.stdout
    assert not list(out.glob("*/*/*/seed3"))
    again = experiment(path, "--report-only", "--publish")
    assert again.returncode == 0 and (published / "results.md").read_text() == table


@pytest.mark.slow
def test_multitask_arms_give_the_tasks_table_and_resume_nothing_twice(
        small_tasks: list[str], tiny_encoder_dir: Path, tmp_path: Path) -> None:
    train: dict = {"tasks": {"rte": {}, "mrpc": {}}, "encoder": str(tiny_encoder_dir),
                   "max_steps": 4, "batch_size": 4, "max_seq_len": 64, "progress_bar": False}
    for override in small_tasks:
        key, value = override.split("=", 1)
        if key.startswith("tasks.scitail"):
            continue
        node = train
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    config = {"seeds": [1, 2], "output_dir": str(tmp_path / "cmp"), "train": train,
              "arms": {"proportional": {}, "cycle+pcgrad": {
                  "train": {"sampler": {"kind": "cycle"}, "pcgrad": True}}}}
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    first = experiment(path)
    assert first.returncode == 0, first.stderr[-3000:]

    out = tmp_path / "cmp"
    saved = yaml.safe_load((out / "cycle+pcgrad/multitask/full/seed2/config.yaml").read_text())
    assert saved["sampler"]["kind"] == "cycle" and saved["pcgrad"] is True
    assert saved["seed"] == 2 and saved["max_steps"] == 4
    # 2 arms × 2 seeds × (rte accuracy, mrpc accuracy, mrpc f1)
    assert len((out / "results.csv").read_text().splitlines()) == 1 + 2 * 2 * 3
    table = (out / "results.md").read_text().splitlines()
    assert table[0] == "| arm | mrpc accuracy | mrpc f1 | rte accuracy | mean |"
    assert table[2].startswith("| proportional | ") and table[3].startswith("| cycle+pcgrad |")
    assert table[2].count(" ± ") == 4, table
    assert "4 comparisons, not corrected for multiple comparisons" in "\n".join(table)
    assert table[-1].startswith("| cycle+pcgrad − proportional | ")
    result = json.loads((out / "proportional/multitask/full/seed1/result.json").read_text())
    assert result["steps"] == 4 and set(result["metrics"]) == {"rte", "mrpc"}

    stamps = [p.stat().st_mtime_ns for p in records(out)]
    second = experiment(path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert " run Cell" not in second.stderr
    assert [p.stat().st_mtime_ns for p in records(out)] == stamps

    # --report-only: tables from the finished runs; an arm with none shows as not run.
    config["arms"]["uniform"] = {"train": {"sampler": {"kind": "uniform"}}}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    report = experiment(path, "--report-only")
    assert report.returncode == 0, report.stderr[-3000:]
    assert " run Cell" not in report.stderr and not (out / "uniform").exists()
    assert "| uniform | not run | not run | not run | not run |" in report.stdout
    assert "4 of 6 runs finished" in report.stdout


@pytest.mark.slow
def test_stage_seeds_cross_fine_tuning_seeds_and_the_trainer_backend_runs(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    files = {}
    for task, rows in (("rte", 16), ("mrpc", 16)):
        files[task] = {
            "train": str(head_jsonl(prepared_data / task / "train.jsonl",
                                    tmp_path / f"{task}_train.jsonl", rows)),
            "dev": str(head_jsonl(prepared_data / task / "dev.jsonl",
                                  tmp_path / f"{task}_dev.jsonl", 8))}
    small = {"encoder": str(tiny_encoder_dir), "max_seq_len": 64, "batch_size": 8,
             "progress_bar": False, "cache_dir": str(tmp_path / "cache")}
    config = {
        "tasks": ["rte"], "task_files": {"rte": files["rte"]}, "seeds": [3],
        "data_dir": str(prepared_data), "output_dir": str(tmp_path / "runs"),
        "stages": {"mt": {"train": {"tasks": files, "max_steps": 2, **small},
                          "seeds": [1, 2]}},
        "arms": {"plain": None, "mt": "stage:mt",
                 "hf": {"backend": "hf_trainer", "train": {"precision": "fp32"}}},
        "baseline": "plain", "train": {"max_steps": 2, **small},
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    # what is left counts each untrained stage once, however many runs start from it
    planned = experiment(path, "--report-only")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "left: 4 runs and 2 stages to train" in planned.stdout
    # --stages-only: the long stage-1 runs first, nothing fine-tuned
    stages = experiment(path, "--stages-only")
    assert stages.returncode == 0, stages.stderr[-3000:]
    assert "left: 4 runs and 0 stages to train" in experiment(path, "--report-only").stdout
    out = tmp_path / "runs"
    assert sorted(p.parent.name for p in out.glob("stages/mt/seed*/result.json")) == \
        ["seed1", "seed2"]
    # a stage whose weights are gone (deleted, or on another machine) is planned again
    (out / "stages/mt/seed2/last").rename(out / "stages/mt/seed2/gone")
    assert "left: 4 runs and 1 stage to train" in experiment(path, "--report-only").stdout
    (out / "stages/mt/seed2/gone").rename(out / "stages/mt/seed2/last")
    assert not (out / "plain").exists() and not (out / "mt").exists()
    trained = yaml.safe_load((out / "stages/mt/seed1/config.yaml").read_text())
    # the stage's cosmetic keys reach its training (resumable saves, no progress bar) and
    # stay out of its record's keys
    assert trained["progress_bar"] is False and trained["cache_dir"] == small["cache_dir"]
    stage_made = json.loads((out / "stages/mt/seed1/result.json").read_text())
    assert "progress_bar" not in stage_made["train_keys"]
    # a stage's record says what ran as a run's does: SMART settings (none here), code
    # version, the machines that trained it
    assert stage_made["smart_settings"] is None and stage_made["teacher_start_share"] is None
    assert stage_made["code_version"]["package"] and stage_made["trained_by"][0]["from_step"] == 0
    # --arms: only the named arms' runs are trained; the tables show every arm
    only_plain = experiment(path, "--arms", "plain")
    assert only_plain.returncode == 0, only_plain.stderr[-3000:]
    assert (out / "plain/rte/full/seed3/result.json").is_file()
    assert not (out / "mt").exists() and not (out / "hf").exists()
    assert "| mt | not run |" in (out / "results.md").read_text()
    assert "left: 3 runs and 0 stages to train" in only_plain.stdout
    unknown = experiment(path, "--arms", "plain,nope")
    assert unknown.returncode == 2 and "key '--arms': no arm 'nope' (allowed: hf, mt, plain)" \
        in unknown.stderr
    first = experiment(path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "stage mt seed" not in first.stderr  # trained once, by --stages-only
    # once every run that starts from a stage has finished, its weights are not needed
    (out / "stages/mt/seed2/last").rename(out / "stages/mt/seed2/gone")
    assert "nothing left to run" in experiment(path, "--report-only").stdout
    (out / "stages/mt/seed2/gone").rename(out / "stages/mt/seed2/last")

    stage_prints = {seed: json.loads((out / f"stages/mt/seed{seed}/result.json").read_text())
                    ["weights_fingerprint"] for seed in (1, 2)}
    assert stage_prints[1] != stage_prints[2]  # two stage-1 seeds, two start points
    for seed in (1, 2):
        record = json.loads((out / f"mt/rte/full/seed3-stage{seed}/result.json").read_text())
        assert record["start_fingerprint"] == stage_prints[seed] and record["stage_seed"] == seed
        run = yaml.safe_load((out / f"mt/rte/full/seed3-stage{seed}/config.yaml").read_text())
        assert run["init_checkpoint"] == str(out / f"stages/mt/seed{seed}/last")
    hf = json.loads((out / "hf/rte/full/seed3/result.json").read_text())
    assert hf["backend"] == "hf_trainer" and hf["steps"] == 2
    assert hf["trained_by"] == [{"from_step": 0, "code_version": hf["code_version"],
                                 "machine": hf["machine"]}]
    assert 0 <= hf["metrics"]["rte"]["accuracy"] <= 1
    table = (out / "results.md").read_text()
    assert "| stage mt seed 1 (no fine-tuning) |" in table
    assert "| mt − plain |" in table and "| hf − plain |" in table and "| hf − mt |" not in table

    # A stage re-trained with other weights than its finished runs started from is an
    # error, and nothing is fine-tuned from it.
    record_path = out / "stages/mt/seed1/result.json"
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "weights_fingerprint": "0" * 64}))
    shutil.rmtree(out / "stages/mt/seed1/last")
    (out / "stages/mt/seed1/summary.json").unlink()
    shutil.rmtree(out / "mt/rte/full/seed3-stage1")
    rebuilt = experiment(path)
    assert rebuilt.returncode == 2, rebuilt.stderr[-3000:]
    assert "stage 'mt'" in rebuilt.stderr and str(record_path) in rebuilt.stderr
    assert "retrained_stages" in rebuilt.stderr and "threads" in rebuilt.stderr
    assert "Traceback" not in rebuilt.stderr
    assert not (out / "mt/rte/full/seed3-stage1/result.json").exists()

    # retrained_stages: accept records the new weights as a second realization; new runs
    # start from it, and runs made from either realization count.
    accepted = experiment(path, "retrained_stages=accept")
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    stage = json.loads(record_path.read_text())
    assert [r["weights_fingerprint"] for r in stage["realizations"]] == \
        ["0" * 64, stage_prints[1]]  # the same machine and threads: the same weights again
    assert stage["realizations"][1]["machine"]["torch_threads"] >= 1
    run_path = out / "mt/rte/full/seed3-stage1/result.json"
    run = json.loads(run_path.read_text())
    assert run["start_fingerprint"] == stage_prints[1] and run["machine"]["cpu"]
    assert [seg["from_step"] for seg in run["trained_by"]] == [0]
    assert run["trained_by"][0]["machine"] == run["machine"]
    assert "| stage mt seed 1 (no fine-tuning; 2 realizations) |" in \
        (out / "results.md").read_text()
    for start, code in (("0" * 64, 0), ("1" * 64, 2)):
        run_path.write_text(json.dumps({**run, "start_fingerprint": start}))
        report = experiment(path, "--report-only", "retrained_stages=accept")
        assert report.returncode == code, report.stderr[-3000:]


def test_migration_moves_old_records_to_the_runner_format(tmp_path: Path,
                                                          monkeypatch) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("migrate_records",
                                                  REPO / "scripts" / "migrate_records.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    migrate = module.migrate

    data = tmp_path / "data"
    (data / "rte").mkdir(parents=True)
    (data / "rte" / "train.jsonl").write_text('{"x": 1}\n' * 5)
    published = tmp_path / "results" / "cmp"

    def write(relative: str, record: dict) -> None:
        (published / relative).parent.mkdir(parents=True, exist_ok=True)
        (published / relative).write_text(json.dumps(record))

    config = {"tasks": ["rte"], "seeds": [13], "data_dir": str(data),
              "output_dir": str(tmp_path / "runs"), "publish_dir": str(published),
              # an old SMART record ran the teacher schedule that was the default then
              "arms": {"single": None, "smart": {"train": {"smart": {
                  "enabled": True, "teacher_schedule": "paper"}}}},
              "train": {"epochs": 2, "precision": "fp32"}}
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(config))
    # glue_comparison: flat metrics and a command; mtdnn.sweep: start_point
    write("single/rte/seed13/result.json", {
        "task": "rte", "seed": 13, "metrics": {"accuracy": 0.5}, "steps": 4,
        "command": "/x/.venv/bin/python train.py 'tasks=[rte]' epochs=2 seed=13"})
    write("smart/rte/full/seed13/result.json", {
        "start_point": "smart", "task": "rte", "subset": "full", "seed": 13,
        "metrics": {"accuracy": 0.6}, "train_keys": {"epochs": 2, "smart": {"enabled": True}},
        "start_fingerprint": None, "steps": 4})
    monkeypatch.chdir(tmp_path)
    changed = migrate(path)
    assert sorted(p.relative_to(published).as_posix() for p in changed) == [
        "single/rte/full/seed13/result.json", "smart/rte/full/seed13/result.json"]
    single = json.loads((published / "single/rte/full/seed13/result.json").read_text())
    assert single["metrics"] == {"rte": {"accuracy": 0.5}} and single["arm"] == "single"
    assert single["command"] == "python train.py 'tasks=[rte]' epochs=2 seed=13"
    assert single["train_keys"] == {"epochs": 2, "precision": "fp32"}
    assert single["train_size"] == 5 and not (published / "single/rte/seed13").exists()
    smart = json.loads((published / "smart/rte/full/seed13/result.json").read_text())
    assert smart["arm"] == "smart" and "start_point" not in smart
    assert smart["train_keys"]["precision"] == "fp32"
    assert migrate(path) == []  # idempotent
    report = experiment(path, "--report-only")
    assert report.returncode == 0, report.stderr[-3000:]
    assert "| single | 50.0 (1 seed) |" in report.stdout

    # A recorded command that disagrees with the config is not migrated.
    write("single/rte/seed14/result.json", {
        "task": "rte", "seed": 14, "metrics": {"accuracy": 0.5},
        "command": "python train.py 'tasks=[rte]' epochs=3 seed=14"})
    try:
        migrate(path)
    except SystemExit as stop:
        assert "epochs" in str(stop)
    else:
        raise AssertionError("a record with other keys was migrated")


def test_differences_against_a_baseline_give_welch_p() -> None:
    from scipy import stats

    from mtdnn.analysis.tables import subsets_table

    sizes = {"scitail": {"1pct": {"available": True, "size": 235},
                         "10pct": {"available": True, "size": 2359},
                         "100pct": {"available": False, "size": 23596, "reason": "not run"}}}
    accuracies = {("encoder", "1pct"): [0.70, 0.72, 0.71], ("mt", "1pct"): [0.80, 0.83, 0.81],
                  ("smart", "1pct"): [0.81, 0.83, 0.82], ("encoder", "10pct"): [0.85, 0.85],
                  ("mt", "10pct"): [0.90]}
    rows = [{"task": "scitail", "subset": subset, "arm": arm, "seed": seed,
             "metrics": {"scitail": {"accuracy": value}}}
            for (arm, subset), values in accuracies.items()
            for seed, value in enumerate(values, start=13)]
    subsets = {"scitail": ["1pct", "10pct", "100pct"]}
    for baseline, pairs in ((None, ["mt − encoder", "smart − encoder", "smart − mt"]),
                            ("encoder", ["mt − encoder", "smart − encoder"])):
        table = subsets_table(["scitail"], subsets, False, sizes, ["encoder", "mt", "smart"],
                              rows, baseline).splitlines()
        by_pair = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in table
                   if " − " in line}
        assert list(by_pair) == pairs
    p = stats.ttest_ind([80, 83, 81], [70, 72, 71], equal_var=False).pvalue
    assert by_pair["mt − encoder"][0] == f"+10.3 (p = {p:.3f})"
    assert by_pair["mt − encoder"][1] == "+5.0 (no p: 1 seed)"
    assert by_pair["smart − encoder"][1] == "not run"
    assert all(cells[2].rstrip(" |") == "n/a" for cells in by_pair.values())
    # an arm that does not run on a task (arms.<name>.tasks) is left out of its block
    narrowed = subsets_table(["scitail"], subsets, False, sizes, ["encoder", "mt", "smart"],
                             rows, "encoder", {"encoder": {"scitail"}, "mt": {"scitail"},
                                               "smart": set()})
    assert "| smart |" not in narrowed and "smart − encoder" not in narrowed
    assert "| mt − encoder |" in narrowed


def test_holm_passes_the_smallest_ps_while_each_is_below_its_share() -> None:
    from mtdnn.analysis.statistics import holm

    # m = 4: 0.01 < 0.05/4, 0.015 < 0.05/3, 0.03 > 0.05/2 stops the rest (0.02 never reached)
    assert holm([0.03, 0.01, 0.015, 0.2]) == [False, True, True, False]
    assert holm([0.02, 0.04]) == [True, True]  # 0.02 < 0.025, then 0.04 < 0.05
    assert holm([0.3]) == [False] and holm([]) == []


def test_welch_p_takes_a_constant_side_without_a_warning() -> None:
    import warnings

    from mtdnn.analysis.statistics import welch_p

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # gap 0.1, standard error sqrt(0.02 / 2) = 0.1: t = 1 on 1 degree of freedom
        assert welch_p([0.3, 0.3], [0.1, 0.3]) == pytest.approx(0.5)
    assert welch_p([0.3, 0.3], [0.3, 0.3]) is None
    assert welch_p([0.3], [0.1, 0.3]) is None


def test_paired_differences_match_runs_by_seed_and_stage_seed() -> None:
    from scipy import stats

    from mtdnn.analysis.tables import paired_table

    ours = {"plain": {(13, None): 0.60, (14, None): 0.70, (15, None): 0.65},
            "smart": {(13, None): 0.62, (14, None): 0.71, (15, None): 0.68, (16, None): 0.99},
            "mt": {(13, 13): 0.80, (14, 13): 0.81},
            "mt2": {(13, 13): 0.82, (14, 13): 0.82}}
    rows = [{"arm": arm, "task": "rte", "subset": "full", "seed": seed, "stage_seed": stage,
             "metrics": {"rte": {"accuracy": value}}}
            for arm, runs in ours.items() for (seed, stage), value in runs.items()]
    pairs = [("smart", "plain"), ("mt", "plain"), ("mt2", "mt")]
    lines = paired_table(pairs, {"rte accuracy": ("rte", "accuracy", None)}, rows).splitlines()
    by_pair = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1].rstrip(" |")
               for line in lines if " − " in line}
    # seed 16 has no plain run, so it is left out; the gaps are 2, 1, 3 points
    p = stats.ttest_rel([62, 71, 68], [60, 70, 65]).pvalue
    assert by_pair["smart − plain"] == f"+2.0 ± 1.0 (p = {p:.3f}, n = 3)"
    # runs of different stage seeds do not pair: mt − plain has no row
    assert "mt − plain" not in by_pair
    # one stage seed: the differences are its runs', given its weights, and say so; two of
    # them are too few for a p
    assert by_pair["mt2 − mt"] == "+1.5 ± 0.7 (n too small: n = 2 runs of 1 stage seed)"
    assert "1 comparison, not corrected" in lines[1]  # mt2 − mt has no p
    assert paired_table([("mt", "plain")], {"rte accuracy": ("rte", "accuracy", None)},
                        rows) == ""


def test_runs_of_one_stage_seed_count_once_in_every_test() -> None:
    """Two fine-tuning seeds from one stage share its weights: with several stage seeds,
    each is one sample (its runs' mean), so stage-1 variance is in the spread."""
    from scipy import stats

    from mtdnn.analysis.statistics import difference, paired_difference

    def keyed(runs: dict[tuple[int, int | None], float]) -> dict:
        return {("full", seed, stage): value for (seed, stage), value in runs.items()}

    plain = keyed({(13, None): 60.0, (14, None): 70.0, (15, None): 65.0})
    # stage 13's two runs agree, stage 14's too, but the two stages differ by 10 points
    mt = keyed({(13, 13): 80.0, (14, 13): 81.0, (13, 14): 70.0, (14, 14): 72.0})
    smart = keyed({(13, 13): 83.0, (14, 13): 82.0, (13, 14): 74.0, (14, 14): 75.0})
    welch = stats.ttest_ind([80.5, 71.0], [60, 70, 65], equal_var=False).pvalue
    assert difference(mt, plain) == f"+10.8 (p = {welch:.3f})"
    # the four runs as if independent would give a smaller p: the test that left it out
    assert stats.ttest_ind([80, 81, 70, 72], [60, 70, 65], equal_var=False).pvalue < welch
    # paired: the per-run gaps 3, 1 (stage 13) and 4, 3 (stage 14) average to 2 and 3.5
    # (two differences give no p: a t-test over two points says little, and two equal
    # differences would give p = 0)
    assert paired_difference(smart, mt) == "+2.8 ± 1.1 (n too small: n = 2 stage seeds)"
    third = keyed({(13, 15): 60.0, (14, 15): 61.0})
    p = stats.ttest_1samp([2.0, 3.5, 1.0], 0.0).pvalue
    assert paired_difference({**smart, **keyed({(13, 15): 61.0, (14, 15): 62.0})},
                             {**mt, **third}) == f"+2.2 ± 1.3 (p = {p:.3f}, n = 3 stage seeds)"
    # one stage seed a side: Welch over its runs, labelled as given that stage
    one = {key: value for key, value in mt.items() if key[2] == 13}
    p_one = stats.ttest_ind([80, 81], [60, 70, 65], equal_var=False).pvalue
    assert difference(one, plain) == f"+15.5 (p = {p_one:.3f} over runs of 1 stage seed)"
    assert difference({("full", 13, 13): 80.0}, plain) == "+15.0 (no p: 1 stage seed)"
    assert difference(plain, {("full", 13, None): 60.0}) == "+5.0 (no p: 1 seed)"


def test_learning_curves_and_the_fine_tuning_length_rule() -> None:
    from mtdnn.analysis.tables import learning_curve_table

    curves = {("rte", 1): [0.50, 0.615, 0.61], ("rte", 2): [0.52, 0.635, 0.63],
              ("mrpc", 1): [0.70, 0.74, 0.75], ("mrpc", 2): [0.72, 0.76, 0.77]}
    rows = [{"arm": "plain", "task": task, "seed": seed,
             "metrics": {task: {"accuracy": values[-1], "f1": 0.0}},
             "evaluations": [{"step": 10 * epoch, "epoch": epoch,
                              "metrics": {task: {"accuracy": value, "f1": 0.0}}}
                             for epoch, value in enumerate(values, start=1)]}
            for (task, seed), values in curves.items()]
    lines = learning_curve_table(["plain"], rows, ["rte", "mrpc"]).splitlines()
    assert "| epoch | rte accuracy | mrpc accuracy | mean over tasks |" in lines
    # epoch 2: rte 62.5, mrpc 75.0, mean 68.75; epoch 3: 62.0, 76.0, 69.0 (the best)
    assert "| 2 | 62.5 ± 1.4 | 75.0 ± 1.4 | 68.8 |" in lines
    assert "| 3 | 62.0 ± 1.4 | 76.0 ± 1.4 | 69.0 |" in lines
    assert lines[-1] == ("Best mean over tasks after epoch 3 (69.00); the smallest epoch "
                         "within 0.5 points of it: **2** (68.75).")
    assert learning_curve_table(["plain"], [{**rows[0], "evaluations": []}], ["rte"]) == ""


def test_the_papers_sign_pattern_beside_ours() -> None:
    from scipy import stats

    from mtdnn.analysis.tables import sign_pattern_table

    ours = {("plain", "rte"): [0.60, 0.62, 0.61], ("smart", "rte"): [0.64, 0.66, 0.65],
            ("plain", "mrpc"): [0.80, 0.81, 0.79], ("smart", "mrpc"): [0.79, 0.80, 0.80]}
    rows = [{"arm": arm, "task": task, "subset": "full", "seed": seed,
             "metrics": {task: {"accuracy": v}}}
            for (arm, task), values in ours.items() for seed, v in enumerate(values, start=13)]
    paper = {"plain": {"rte accuracy": 63.5, "mrpc accuracy": 89.0},
             "smart": {"rte accuracy": 71.2, "mrpc accuracy": 91.3}}
    columns = {"rte accuracy": ("rte", "accuracy", None),
               "mrpc accuracy": ("mrpc", "accuracy", None)}
    lines = sign_pattern_table(paper, [("smart", "plain")], columns, rows).splitlines()
    p = stats.ttest_ind([64, 66, 65], [60, 62, 61], equal_var=False).pvalue
    q = stats.ttest_ind([79, 80, 80], [80, 81, 79], equal_var=False).pvalue
    row = lines[[i for i, line in enumerate(lines) if line.startswith("| smart − plain")][0]]
    assert row == (f"| smart − plain | +7.7 → +4.0 (p = {p:.3f}) ✓ | "
                   f"+2.3 → -0.3 (p = {q:.3f}) ✗ |")
    assert lines[-1] == "The same sign as the paper in 1 of 2 comparisons run; p < 0.05 in " \
                        "1 of the 2, 1 of them with the paper's sign."
    # a difference the paper has as 0.0 has no sign: shown, and counted apart
    flat = {**paper, "flat": dict(paper["plain"])}
    rows += [{**row, "arm": "flat"} for row in rows if row["arm"] == "smart"]
    lines = sign_pattern_table(flat, [("smart", "plain"), ("flat", "plain")], columns,
                               rows).splitlines()
    row = lines[[i for i, line in enumerate(lines) if line.startswith("| flat − plain")][0]]
    assert row == f"| flat − plain | +0.0 → +4.0 (p = {p:.3f}) | +0.0 → -0.3 (p = {q:.3f}) |"
    assert lines[-1] == "The same sign as the paper in 1 of 2 comparisons run (2 more where " \
                        "the paper's is 0.0); p < 0.05 in 2 of the 4, 1 of them with the " \
                        "paper's sign."
    # a pair the paper does not have is left out
    assert sign_pattern_table(paper, [("other", "plain")], columns, rows) == ""


def test_narrowing_the_tasks_keeps_the_paper_and_agreement_entries_of_the_rest_out(
        tmp_path: Path) -> None:
    from mtdnn.errors import MtdnnError
    from mtdnn.experiment import load_experiment

    config = tmp_path / "table.yaml"
    config.write_text(yaml.safe_dump({
        "tasks": ["rte", "mnli"], "arms": {"plain": None, "smart": None},
        "paper": {"plain": {"rte accuracy": 63.5, "mnli accuracy": 84.5},
                  "smart": {"rte accuracy": 71.2, "mnli accuracy": 85.6}},
        "agreement": {"mnli": {"chaosnli": "c.jsonl", "rows": ["d.jsonl"]}}}))
    # a worker taking the grid one task at a time: the other task's entries are not errors
    narrowed = load_experiment(config, ["tasks=[rte]"])
    assert narrowed.paper == {"plain": {"rte accuracy": 63.5}, "smart": {"rte accuracy": 71.2}}
    assert narrowed.agreement == {}
    whole = load_experiment(config, [])
    assert whole.paper["plain"] == {"rte accuracy": 63.5, "mnli accuracy": 84.5}
    assert list(whole.agreement) == ["mnli"]
    # an entry for a task the file never runs is still a mistake, named
    with pytest.raises(MtdnnError, match="'rtee accuracy', which the table does not have"):
        load_experiment(config, ["tasks=[rte]", "paper.plain.rtee accuracy=1"])
    with pytest.raises(MtdnnError, match="agreement names task 'snli'"):
        load_experiment(config, ["agreement.snli={chaosnli: c.jsonl, rows: [d.jsonl]}"])


@pytest.mark.slow
def test_experiments_share_a_stage_dir_and_reuse_each_others_runs(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    files = {task: {"train": str(head_jsonl(prepared_data / task / "train.jsonl",
                                            tmp_path / f"{task}_train.jsonl", 16)),
                    "dev": str(head_jsonl(prepared_data / task / "dev.jsonl",
                                          tmp_path / f"{task}_dev.jsonl", 8))}
             for task in ("rte", "mrpc")}
    small = {"encoder": str(tiny_encoder_dir), "max_seq_len": 64, "batch_size": 8,
             "progress_bar": False, "cache_dir": str(tmp_path / "cache"), "max_steps": 2}
    stages = {"mt": {"train": {"tasks": files, **small}, "seeds": [1]}}
    first = {"tasks": ["rte"], "task_files": {"rte": files["rte"]}, "seeds": [3],
             "data_dir": str(prepared_data), "output_dir": str(tmp_path / "first"),
             "publish_dir": str(tmp_path / "first_published"),
             "stage_dir": str(tmp_path / "stages"), "stages": stages,
             "arms": {"plain": None, "mt": "stage:mt"}, "train": small}
    # the second experiment names its arms otherwise; one has keys of its own, and it has
    # a second seed: those runs are trained, the others are the first experiment's
    second = {**first, "output_dir": str(tmp_path / "second"), "publish_dir": None,
              "seeds": [3, 4], "reuse_from": [str(tmp_path / "first_published")],
              "arms": {"single": None, "from-mt": "stage:mt",
                       "lr": {"train": {"optimizer": {"lr": 1e-4}}}}}
    for name, config in (("first", first), ("second", second)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
    ran = experiment(tmp_path / "first.yaml", "--publish")
    assert ran.returncode == 0, ran.stderr[-3000:]
    published = tmp_path / "first_published"
    stage_record = json.loads((published / "stages/mt/seed1/result.json").read_text())
    assert not (tmp_path / "first" / "stages").exists()  # the stage lives in stage_dir

    shutil.rmtree(tmp_path / "first")  # a later session: only the published records
    ran = experiment(tmp_path / "second.yaml")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "stage mt seed" not in ran.stderr  # the shared stage was not trained again
    out = tmp_path / "second"
    for arm, source in (("single", "plain/rte/full/seed3"),
                        ("from-mt", "mt/rte/full/seed3-stage1")):
        relative = f"{arm}/rte/full/{Path(source).name}/result.json"
        record = json.loads((out / relative).read_text())
        original = json.loads((published / source / "result.json").read_text())
        assert record["reused_from"] == str(published / source / "result.json")
        assert record["arm"] == arm and record["metrics"] == original["metrics"]
    assert json.loads((out / "from-mt/rte/full/seed3-stage1/result.json").read_text())[
        "start_fingerprint"] == stage_record["weights_fingerprint"]
    trained = sorted(p.relative_to(out).parent.as_posix() for p in records(out)
                     if "reused_from" not in json.loads(p.read_text()))
    assert trained == ["from-mt/rte/full/seed4-stage1", "lr/rte/full/seed3",
                       "lr/rte/full/seed4", "single/rte/full/seed4"]
    assert ran.stderr.count(" run Cell") == 4 and ran.stderr.count("INFO reused ") == 2


def test_publish_copies_records_of_a_relative_output_dir(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from mtdnn.experiment import load_experiment, publish

    monkeypatch.chdir(tmp_path)
    record = Path("runs/x/plain/rte/full/seed1/result.json")
    record.parent.mkdir(parents=True)
    record.write_text('{"arm": "plain"}')
    Path("runs/x/results.md").write_text("table")
    config = load_experiment(None, ["output_dir=runs/x", "publish_dir=published",
                                    "arms={plain: null}"])
    publish(config)
    assert Path("published/plain/rte/full/seed1/result.json").read_text() == '{"arm": "plain"}'
    assert Path("published/results.md").read_text() == "table"


def test_the_tasks_table_before_any_run_has_finished_says_so() -> None:
    from mtdnn.analysis.tables import tasks_table

    table = tasks_table(["plain", "smart"], [], {}, ["rte"])
    assert table == "No run has finished yet (arms: plain, smart).\n"
    finished = [{"arm": "plain", "subset": "full", "seed": 13,
                 "metrics": {"rte": {"accuracy": 0.6}}}]
    assert tasks_table(["plain", "smart"], finished, {}, ["rte"]).splitlines()[:4] == [
        "| arm | rte accuracy | mean |", "|---|---|---|",
        "| plain | 60.0 (1 seed) | 60.0 (1 seed) |", "| smart | not run | not run |"]


def test_each_smart_arm_is_labelled_by_the_settings_it_ran() -> None:
    """A record's resolved settings label its arm; an older record's keys are resolved (its
    preset's ε, the teacher its format read it with) and marked; no teacher, no schedule."""
    from mtdnn.analysis.smart_tables import smart_settings_table

    new = {"arm": "scaled", "smart_settings": {
        "epsilon": 1e-5, "adv_weight": 1.0, "bregman_weight": 1.0, "teacher_schedule": "scaled",
        "teacher_lag_fraction": 0.03, "preset": "paper"}}
    old = {"arm": "calibrated", "train_keys": {"smart": {
        "enabled": True, "preset": "calibrated", "teacher_schedule": "paper"}}}
    no_teacher = {"arm": "no-breg", "train_keys": {"smart": {
        "enabled": True, "epsilon": 1e-3, "bregman_weight": 0}}}
    plain = {"arm": "plain", "train_keys": {}}
    table = smart_settings_table(["plain", "calibrated", "no-breg", "scaled"],
                                 [plain, old, no_teacher, new]).splitlines()
    assert table[-3:] == ["| calibrated * | 0.001 | 1 | 1 | paper | — | calibrated |",
                          "| no-breg * | 0.001 | 1 | 0 | — | — | — |",
                          "| scaled | 1e-05 | 1 | 1 | scaled | 0.03 | paper |"]


def test_the_stages_smart_is_shown_with_its_teacher_share() -> None:
    """A SMART stage's logged terms and teacher share (median over its seeds) get a row; an
    older stage record's share is computed from its schedule and steps and marked; a stage
    without SMART gets none."""
    from mtdnn.analysis.smart_tables import stage_terms_table
    from mtdnn.modeling.smart import teacher_start_share

    scaled = {"smart_settings": {"epsilon": 1e-5, "adv_weight": 1.0, "bregman_weight": 1.0,
                                 "teacher_schedule": "scaled", "teacher_lag_fraction": 0.03,
                                 "preset": "paper"}, "teacher_start_share": 0.0}
    seeds = [{**scaled, "smart_terms": {"bregman_ratio": {"median": m, "max": 1.0}}}
             for m in (0.001, 0.002, 0.004)]
    old = {"train_keys": {"smart": {"enabled": True, "preset": "calibrated",
                                    "teacher_schedule": "paper"}}, "steps": 513}
    table = stage_terms_table({"mt": [{"train_keys": {}}], "old": [old], "new": seeds})
    share = teacher_start_share(513, 513, 0.99, 0.999, 0.1, "paper", 0.03)
    assert "| stage mt |" not in table
    assert f"| stage old | — | — | — | {share:.2g}* |" in table
    assert "| stage new | — | — | 0.002 | 0 |" in table
    assert "| stage new | 1e-05 | 1 | 1 | scaled | 0.03 | paper |" in table
    assert stage_terms_table({"mt": [{"train_keys": {}}]}) == ""


def test_records_say_their_format_and_older_ones_read_as_the_current(tmp_path: Path) -> None:
    """One reader for every record format: a format-1 stage record (one training, no
    realizations) reads with its realization; a record newer than this mtdnn is refused."""
    from mtdnn.errors import MtdnnError
    from mtdnn.experiment.records import (
        RECORD_FORMAT,
        read_record,
        realizations,
        write_record,
    )

    stage = {"stage": "mt", "seed": 1, "weights_fingerprint": "abc", "machine": None,
             "train_seconds": 3.0, "metrics": {"rte": {"accuracy": 0.5}}}
    (tmp_path / "stage.json").write_text(json.dumps(stage))
    read = read_record(tmp_path / "stage.json", "stage")
    assert read["format"] == RECORD_FORMAT and read["metrics"] == stage["metrics"]
    assert [r["weights_fingerprint"] for r in realizations(read)] == ["abc"]
    run = {"arm": "plain", "task": "rte", "metrics": {"rte": {"accuracy": 0.5}}}
    write_record(tmp_path / "run.json", run)
    assert json.loads((tmp_path / "run.json").read_text())["format"] == RECORD_FORMAT
    assert read_record(tmp_path / "run.json") == {**run, "format": RECORD_FORMAT}
    (tmp_path / "new.json").write_text(json.dumps({**run, "format": RECORD_FORMAT + 1}))
    with pytest.raises(MtdnnError, match="this mtdnn reads formats 1 to"):
        read_record(tmp_path / "new.json")


def test_records_before_format_3_name_the_teacher_schedule_their_runs_had(
        tmp_path: Path) -> None:
    """`scaled` became the default teacher schedule in format 3: an older record of a run
    with a teacher reads as the paper's schedule (the only one then), so that its arm, which
    now names `teacher_schedule: paper`, still matches it; a run without a teacher (μ = 0,
    by its keys or its preset) or of format 3 reads as written."""
    from mtdnn.experiment.records import read_record

    def read(smart: dict, version: int = 2) -> dict:
        path = tmp_path / "record.json"
        path.write_text(json.dumps({"arm": "a", "metrics": {"rte": {"accuracy": 0.5}},
                                    "train_keys": {"epochs": 4, "smart": smart},
                                    "format": version}))
        return read_record(path)["train_keys"]["smart"]

    calibrated = {"enabled": True, "preset": "calibrated"}
    assert read(calibrated) == {**calibrated, "teacher_schedule": "paper"}
    assert read({"enabled": True}) == {"enabled": True, "teacher_schedule": "paper"}
    for as_written in ({**calibrated, "bregman_weight": 0},
                       {"enabled": True, "preset": "reference"}, {"enabled": False},
                       {"enabled": True, "teacher_schedule": "ramp"}):
        assert read(as_written) == as_written
    assert read(calibrated, version=3) == calibrated


def test_an_older_records_teacher_share_is_computed_from_its_schedule_and_steps(
        tmp_path: Path) -> None:
    """Records from before the teacher's share was logged show it computed from their
    schedule (the paper's, by format 3's reading) and steps, marked as computed; a logged
    share is shown as logged; a run without a teacher has none."""
    from mtdnn.analysis.smart_tables import schedule_start_share, smart_terms_table
    from mtdnn.experiment.records import read_record

    def record(name: str, smart: dict, **extra) -> dict:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({
            "arm": name, "task": "rte", "subset": "full", "seed": 13, "steps": 310,
            "metrics": {"rte": {"accuracy": 0.5}}, "train_keys": {"smart": smart},
            "smart_terms": {"bregman_ratio": {"median": 0.02, "max": 0.1}}, "format": 2,
            **extra}))
        return read_record(path)

    old = record("old", {"enabled": True, "preset": "calibrated"})
    assert schedule_start_share(old) == pytest.approx(0.99 ** 31 * 0.999 ** 279)
    no_teacher = record("no-teacher", {"enabled": True, "bregman_weight": 0})
    assert schedule_start_share(no_teacher) is None
    new = record("new", {"enabled": True}, format=3, teacher_start_share=0.0,
                 dev_entropy={"rte": 0.5})
    table = smart_terms_table(["old", "no-teacher", "new"], [old, no_teacher, new])
    rows = {line.split(" | ")[0]: line for line in table.splitlines()}
    assert rows["| old"].split(" | ")[-2] == "0.55*"
    assert rows["| new"].split(" | ")[-2] == "0"
    assert rows["| no-teacher"].split(" | ")[-2] == "—"
    # an entropy the record does not hold is said to be unlogged, not left blank
    assert rows["| new"].split(" | ")[-1] == "0.500 |"
    assert rows["| old"].split(" | ")[-1] == "not logged |"
    assert "not logged: records from before the dev entropy was" in table
    # An arm with runs of both kinds: every run counts, not only the one that logged.
    mixed = [{**old, "arm": "mixed"}, {**old, "arm": "mixed", "seed": 14},
             {**new, "arm": "mixed"}]
    row = next(line for line in smart_terms_table(["mixed"], mixed).splitlines()
               if line.startswith("| mixed |"))
    assert row.split(" | ")[-2:] == ["0.55*", "0.500 (1 of 3 runs) |"]


def test_a_grid_run_logs_lines_not_a_progress_bar(tmp_path: Path) -> None:
    """Jobs of a grid run at once: each logs a line every tenth of its steps instead of a
    bar, whatever the training keys say (a cosmetic key: records are unaffected)."""
    from mtdnn.config.resolve import resolve_config
    from mtdnn.experiment import load_experiment
    from mtdnn.experiment.grid import Cell
    from mtdnn.experiment.jobs import run_keys

    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"tasks": ["rte"], "seeds": [1], "arms": {"plain": None},
                                    "train": {"progress_bar": True},
                                    "output_dir": str(tmp_path / "out")}))
    config = load_experiment(path, [])
    cell = Cell(arm="plain", task="rte", subset="full", seed=1, stage_seed=None)
    keys = run_keys(config, cell, {"file": "rte_train.jsonl"}, None, tmp_path / "out" / "x")
    assert resolve_config(keys).progress_bar is False


def test_a_table_of_part_of_its_grid_names_the_arms_with_runs_missing() -> None:
    from mtdnn.experiment import load_experiment
    from mtdnn.experiment.results import grid_progress

    config = load_experiment(None, ["tasks=[rte]", "seeds=[1,2,3]",
                                    "arms={plain: null, smart: null}"])
    sizes = {"rte": {"full": {"available": True}}}
    runs = [{"arm": "plain", "seed": seed} for seed in (1, 2, 3)] + [{"arm": "smart", "seed": 1}]
    assert grid_progress(config, sizes, runs).startswith(
        "**Part of the grid:** 4 of 6 runs are in; "
        "arms with fewer runs than planned: smart 1 of 3.")
    runs += [{"arm": "smart", "seed": seed} for seed in (2, 3)]
    assert grid_progress(config, sizes, runs) == ""


def test_max_runs_per_cell_keeps_the_first_runs_of_each_arm_varying_the_stage_seed(
        tmp_path: Path) -> None:
    from mtdnn.errors import MtdnnError
    from mtdnn.experiment import load_experiment
    from mtdnn.experiment.grid import cells

    config = tmp_path / "table.yaml"
    config.write_text(yaml.safe_dump({
        "tasks": ["rte", "mrpc"], "seeds": [13, 14], "max_runs_per_cell": {"rte full": 3},
        "stages": {"mt": {"train": {"tasks": ["rte", "mrpc"]}, "seeds": [13, 14, 15]}},
        "arms": {"plain": None, "mt-dnn": {"init": "stage:mt"}}}))
    grid = load_experiment(config, [])
    available = {t: {"full": {"available": True}} for t in ("rte", "mrpc")}
    runs = {(c.arm, c.task, c.seed, c.stage_seed) for c in cells(grid, available)}
    # rte: plain's two seeds (under the cap), mt-dnn's seed 13 on each stage seed
    assert {r for r in runs if r[1] == "rte"} == {
        ("plain", "rte", 13, None), ("plain", "rte", 14, None), ("mt-dnn", "rte", 13, 13),
        ("mt-dnn", "rte", 13, 14), ("mt-dnn", "rte", 13, 15)}
    assert sum(r[1] == "mrpc" for r in runs) == 2 + 6  # no cap: every seed on every stage
    # Training one stage seed at a time keeps the grid's runs: --stage-seeds filters them,
    # where overriding the stage's seeds would change which runs the cap keeps.
    from mtdnn.experiment.command import chosen_stage_seeds
    from mtdnn.experiment.jobs import plan

    folders = [f"{key}={tmp_path / key}" for key in ("output_dir", "stage_dir", "publish_dir")]
    grid = load_experiment(config, folders)
    seeds = chosen_stage_seeds(grid, ("mt-dnn",), "14")
    jobs = [job.name for job in plan(grid, arms=("mt-dnn",), stage_seeds=seeds)]
    assert jobs[0] == "stage mt seed 14" and sorted(jobs[1:]) == [
        "mt-dnn mrpc full seed 13 stage seed 14", "mt-dnn mrpc full seed 14 stage seed 14",
        "mt-dnn rte full seed 13 stage seed 14"]
    narrowed = load_experiment(config, [*folders, "stages.mt.seeds=[14]"])
    assert "mt-dnn rte full seed 14 stage seed 14" in [job.name for job in plan(
        narrowed, arms=("mt-dnn",))]  # the trap the filter avoids
    for bad in ("16", "x", ""):
        with pytest.raises(MtdnnError, match="--stage-seeds") as raised:
            chosen_stage_seeds(grid, None, bad)
        assert raised.value.allowed == "13, 14, 15"
    with pytest.raises(MtdnnError, match="--stage-seeds"):
        chosen_stage_seeds(grid, ("plain",), "13")
    with pytest.raises(MtdnnError, match="cell 'rte 1pct', which the grid does not have"):
        load_experiment(config, ["max_runs_per_cell={rte 1pct: 3}"])
    with pytest.raises(MtdnnError, match="at least one run"):
        load_experiment(config, ["max_runs_per_cell={rte full: 0}"])


@pytest.mark.slow
def test_a_finished_run_whose_inputs_changed_is_refused_then_rerun_alone(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    from mtdnn.files import read_jsonl

    rows = [row for _, row in read_jsonl(prepared_data / "rte/train.jsonl")][:16]
    csv_file = tmp_path / "rte_train.csv"
    with open(csv_file, "w", newline="") as handle:
        csv.writer(handle).writerows([("sentence1", "sentence2", "label")] + [
            (r["sentence1"], r["sentence2"], r["label"]) for r in rows])
    definitions = tmp_path / "tasks.yaml"
    definitions.write_text(yaml.safe_dump({
        "rte": {"type": "classification", "labels": ["entailment", "not_entailment"],
                "inputs": ["sentence1", "sentence2"]},
        "mrpc": {"type": "classification", "labels": ["0", "1"],
                 "inputs": ["sentence1", "sentence2"]}}))
    files = {"rte": {"train": str(csv_file), "dev": str(head_jsonl(
        prepared_data / "rte/dev.jsonl", tmp_path / "rte_dev.jsonl", 8))},
             "mrpc": {"train": str(head_jsonl(prepared_data / "mrpc/train.jsonl",
                                              tmp_path / "mrpc_train.jsonl", 16)),
                      "dev": str(head_jsonl(prepared_data / "mrpc/dev.jsonl",
                                            tmp_path / "mrpc_dev.jsonl", 8))}}
    out = tmp_path / "grid"
    config = tmp_path / "grid.yaml"
    config.write_text(yaml.safe_dump({
        "tasks": ["rte", "mrpc"], "task_files": files, "seeds": [3], "arms": {"plain": None},
        "output_dir": str(out), "data_dir": str(prepared_data),
        "train": {"encoder": str(tiny_encoder_dir), "task_defs": [str(definitions)],
                  "max_steps": 2, "batch_size": 8, "progress_bar": False,
                  "cache_dir": str(tmp_path / "cache")}}))
    ran = experiment(config)
    assert ran.returncode == 0, ran.stderr[-3000:]
    first = json.loads((out / "plain/rte/full/seed3/result.json").read_text())
    assert set(first["inputs"]) == {str(csv_file), files["rte"]["dev"], "task definition rte"}
    mrpc_record = (out / "plain/mrpc/full/seed3/result.json").read_text()

    # every label of the CSV flipped: the finished run is not reused without a word
    flipped = csv_file.read_text().replace(",entailment", ",x").replace(",not_entailment",
                                                                         ",entailment")
    csv_file.write_text(flipped.replace(",x", ",not_entailment"))
    refused = experiment(config)
    assert refused.returncode == 2
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: {csv_file}: 1 finished run of this grid was trained on "
                            "inputs that have changed since")
    assert "plain/rte/full/seed3" in error and "--rerun-changed" in error
    assert "--keep-changed" in error and " run Cell" not in refused.stderr

    kept = experiment(config, "--report-only")  # the tables say which runs are stale
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert f"**Stale:** 1 run in this table was trained on inputs that have changed " \
           f"since: plain/rte/full/seed3 ({csv_file})" in (out / "results.md").read_text()
    assert "2 finished runs checked against their files, 1 trained on inputs" in kept.stdout

    rerun = experiment(config, "--rerun-changed")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert rerun.stderr.count(" run Cell") == 1 and "task='rte'" in rerun.stderr
    assert (out / "plain/mrpc/full/seed3/result.json").read_text() == mrpc_record
    kept_aside = out / "plain/rte/full/seed3-inputs-changed/result-inputs-changed.json"
    assert json.loads(kept_aside.read_text())["inputs"] == first["inputs"]
    again = json.loads((out / "plain/rte/full/seed3/result.json").read_text())
    assert again["inputs"][str(csv_file)] != first["inputs"][str(csv_file)]
    assert "**Stale:**" not in (out / "results.md").read_text()

    # a task definition whose labels were reordered is another definition
    definitions.write_text(definitions.read_text().replace("- '0'\n  - '1'", "- '1'\n  - '0'"))
    refused = experiment(config)
    assert refused.returncode == 2
    assert "trained on inputs that have changed since: task definition mrpc" in refused.stderr


def test_a_multitask_runs_size_is_the_rows_of_its_tasks_train_files(tmp_path: Path) -> None:
    from mtdnn.experiment import load_experiment
    from mtdnn.experiment.grid import subset_sizes

    (tmp_path / "rte").mkdir()
    (tmp_path / "rte/train.jsonl").write_text("{}\n" * 5)
    (tmp_path / "mine.jsonl").write_text("{}\n" * 3)
    config = tmp_path / "grid.yaml"
    config.write_text(yaml.safe_dump({
        "arms": {"plain": None}, "data_dir": str(tmp_path),
        "train": {"tasks": {"rte": {}, "mrpc": {"train": str(tmp_path / "mine.jsonl")}}}}))
    sizes = subset_sizes(load_experiment(config, []), "multitask")
    assert sizes["full"]["size"] == 8 and sizes["full"]["available"]


def test_a_hugging_face_baseline_run_saves_and_continues_from_its_checkpoint(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    """The hf_trainer backend reads save_every_steps: it saves, and a run started again
    continues from its latest checkpoint (and counts its speed over its own steps)."""
    from mtdnn.training.hf_trainer import finetune

    rows = head_jsonl(prepared_data / "rte" / "train.jsonl", tmp_path / "rte.jsonl", 32)
    common = {"epochs": 1, "lr": 5e-5, "batch_size": 8, "seed": 3, "max_seq_len": 64,
              "encoder": str(tiny_encoder_dir), "save_every": 2}
    first = finetune("rte", rows, rows, tmp_path / "hf", max_steps=2, **common)
    assert first["resumed_from_step"] == 0 and first["steps"] == 2
    assert (tmp_path / "hf/trainer/checkpoint-2").is_dir()
    again = finetune("rte", rows, rows, tmp_path / "hf", max_steps=4, **common)
    assert again["resumed_from_step"] == 2 and again["steps"] == 4
    # both processes are named, as our runs' records name theirs
    assert [p["from_step"] for p in again["trained_by"]] == [0, 2]
    assert again["trained_by"][0] == first["trained_by"][0]
    assert sorted(p.name for p in (tmp_path / "hf/trainer").glob("checkpoint-*")) == \
        ["checkpoint-4"]  # the latest kept
