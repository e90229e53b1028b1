"""A grid on each engine: local processes, submitit (its local executor: no Slurm needed)
and a local Ray cluster; the same records from each, failures reported, kills resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, head_jsonl

ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}
LAUNCHERS = {
    "local": ["--launcher", "local", "--jobs", "2"],
    "submitit": ["--launcher", "slurm", "launcher.slurm.cluster=local",
                 "launcher.slurm.time_min=10"],
    "ray": ["--launcher", "ray", "launcher.ray.num_cpus=1"],
}


def experiment(config: Path, *extra: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtdnn.experiment", "--config", str(config),
                           "--threads-per-job", "1", *extra], cwd=REPO, text=True,
                          capture_output=True, env=ENV, **kwargs)


def grid(tmp_path: Path, prepared_data: Path, encoder: Path, name: str, **extra) -> Path:
    """One multi-task stage seed and two fine-tuning cells that start from it."""
    files = {task: {"train": str(head_jsonl(prepared_data / task / "train.jsonl",
                                            tmp_path / f"{task}_train.jsonl", 16)),
                    "dev": str(head_jsonl(prepared_data / task / "dev.jsonl",
                                          tmp_path / f"{task}_dev.jsonl", 8))}
             for task in ("rte", "mrpc")}
    small = {"encoder": str(encoder), "max_seq_len": 64, "batch_size": 8, "max_steps": 3,
             "progress_bar": False, "cache_dir": str(tmp_path / "cache"), "precision": "fp32"}
    config = {"tasks": ["rte"], "task_files": {"rte": files["rte"]}, "seeds": [3, 4],
              "data_dir": str(prepared_data), "output_dir": str(tmp_path / name),
              "stages": {"mt": {"train": {"tasks": files, **small}, "seeds": [1]}},
              "arms": {"mt": "stage:mt"}, "train": small, **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def metrics(out: Path) -> dict[str, dict]:
    return {str(p.relative_to(out).parent): json.loads(p.read_text())["metrics"]
            for p in sorted(out.glob("mt/rte/full/*/result.json"))}


@pytest.mark.slow
def test_the_grid_runs_alike_on_every_launcher_and_a_second_launch_does_nothing(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    found, tables = {}, {}
    for name, flags in LAUNCHERS.items():
        config = grid(tmp_path, prepared_data, tiny_encoder_dir, name)
        ran = experiment(config, *flags)
        assert ran.returncode == 0, (name, ran.stderr[-4000:])
        out = tmp_path / name
        assert (out / "stages/mt/seed1/result.json").is_file(), name
        found[name] = metrics(out)
        tables[name] = (out / "results.md").read_text()
        assert "[3/3]" in ran.stderr  # the stage and two cells, each reported as it ended
    assert sorted(found["local"]) == ["mt/rte/full/seed3-stage1", "mt/rte/full/seed4-stage1"]
    assert found["local"] == found["submitit"] == found["ray"]
    assert tables["local"] == tables["submitit"] == tables["ray"]
    assert (tmp_path / "submitit" / "slurm").is_dir()  # submitit's job folder and logs

    # a finished grid: nothing is submitted, the records stay as they were
    out = tmp_path / "local"
    before = {p: p.stat().st_mtime_ns for p in out.rglob("result.json")}
    again = experiment(tmp_path / "local.yaml", *LAUNCHERS["local"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "to run on the" not in again.stderr and "[1/" not in again.stderr
    assert {p: p.stat().st_mtime_ns for p in out.rglob("result.json")} == before
    assert "nothing left to run" in again.stdout


def test_a_failing_cell_is_reported_with_its_error_and_the_others_finish(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "mrpc_bad.jsonl"
    bad.write_text('{"uid": "a", "sentence1": "A.", "sentence2": "B.", "label": "maybe"}\n')
    config = grid(tmp_path, prepared_data, tiny_encoder_dir, "failing",
                  tasks=["rte", "mrpc"], seeds=[3], arms={"plain": None})
    data = yaml.safe_load(config.read_text())
    data["task_files"]["mrpc"] = {"train": str(bad),
                                  "dev": str(head_jsonl(prepared_data / "mrpc" / "dev.jsonl",
                                                        tmp_path / "mrpc_dev8.jsonl", 8))}
    config.write_text(yaml.safe_dump(data))
    ran = experiment(config, "--jobs", "2")
    assert ran.returncode == 2, ran.stderr[-3000:]
    error = ran.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and "1 of 2 jobs failed" in error
    assert f"plain mrpc full seed 3: {bad}:1: task 'mrpc': label 'maybe'" in error
    assert "Traceback" not in ran.stderr
    out = tmp_path / "failing"
    assert (out / "plain/rte/full/seed3/result.json").is_file()  # the other one finished
    assert not (out / "plain/mrpc/full/seed3/result.json").exists()
    assert "plain" in (out / "results.md").read_text()


@pytest.mark.slow
def test_a_cell_killed_mid_run_resumes_to_an_uninterrupted_runs_metrics(
        prepared_data: Path, tmp_path: Path) -> None:
    """The packaged encoder at 2 layers: slow enough per step to be killed mid-run."""
    files = {"train": str(head_jsonl(prepared_data / "rte" / "train.jsonl",
                                     tmp_path / "rte_train.jsonl", 128)),
             "dev": str(head_jsonl(prepared_data / "rte" / "dev.jsonl",
                                   tmp_path / "rte_dev.jsonl", 16))}
    keys = {"encoder_layers": 2, "max_seq_len": 128, "batch_size": 16, "max_steps": 24,
            "save_every_steps": 2, "eval_every_epoch": False, "progress_bar": False,
            "cache_dir": str(tmp_path / "cache"), "precision": "fp32"}
    configs = {}
    for name in ("whole", "killed"):
        configs[name] = tmp_path / f"{name}.yaml"
        configs[name].write_text(yaml.safe_dump({
            "tasks": ["rte"], "task_files": {"rte": files}, "seeds": [3],
            "data_dir": str(prepared_data), "output_dir": str(tmp_path / name),
            "arms": {"plain": None}, "train": keys}))
    whole = experiment(configs["whole"])
    assert whole.returncode == 0, whole.stderr[-3000:]

    run = tmp_path / "killed" / "plain/rte/full/seed3"
    launched = subprocess.Popen([sys.executable, "-m", "mtdnn.experiment", "--config",
                                 str(configs["killed"]), "--threads-per-job", "1"], cwd=REPO,
                                env=ENV, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not (run / "last" / "checkpoint.json").is_file():
        assert launched.poll() is None and time.monotonic() < deadline, "never saved"
        time.sleep(0.05)
    os.killpg(launched.pid, signal.SIGKILL)  # the launcher and its worker, mid-run
    launched.wait()
    assert not (run / "result.json").exists(), "the run ended before it could be killed"
    step = json.loads((run / "last" / "checkpoint.json").read_text())["step"]
    assert 0 < step < keys["max_steps"]

    resumed = experiment(configs["killed"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    record = json.loads((run / "result.json").read_text())
    original = json.loads((tmp_path / "whole/plain/rte/full/seed3/result.json").read_text())
    assert record["resumed_from_step"] >= step > 0
    assert record["metrics"] == original["metrics"]
    assert record["steps"] == original["steps"] == keys["max_steps"]


def test_a_slurm_job_at_its_time_limit_is_requeued_with_the_same_call() -> None:
    """submitit calls ``checkpoint`` at a time limit or pre-emption and requeues what it
    returns: the same call, which resumes the run from its ``last``."""
    import submitit

    from mtdnn.engines import Requeueable
    from mtdnn.experiment.jobs import run_job

    again = Requeueable(run_job).checkpoint("config", ("stage", "mt", 1), None, 2)
    assert isinstance(again, submitit.helpers.DelayedSubmission)
    assert isinstance(again.function, Requeueable) and again.function.fn is run_job
    assert again.args == ("config", ("stage", "mt", 1), None, 2)


@pytest.mark.parametrize("kind, message", [
    ("ray", "pip install 'mtdnn[ray]'"), ("slurm", "pip install 'mtdnn[slurm]'")])
def test_a_missing_engine_names_its_extra(kind: str, message: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from mtdnn.engines import Job, LauncherConfig, run_jobs
    from mtdnn.errors import MtdnnError

    monkeypatch.setitem(sys.modules, "ray" if kind == "ray" else "submitit", None)
    with pytest.raises(MtdnnError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_jobs(print, [Job("x", ())], LauncherConfig(kind=kind), tmp_path)
