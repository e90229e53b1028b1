"""A grid on each engine: local processes, submitit (its local executor: no Slurm needed)
and a local Ray cluster; the same records from each, failures reported, kills resumed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
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
        assert "\x1b[" not in ran.stderr, name  # every line through our logging, no colours
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


KILL_KEYS = {"encoder_layers": 2, "max_seq_len": 64, "batch_size": 16, "max_steps": 24,
             "save_every_steps": 2, "eval_every_epoch": False, "progress_bar": False,
             "precision": "fp32"}


def killable_grid(folder: Path, prepared_data: Path, name: str) -> Path:
    """One plain RTE run on the packaged encoder at 2 layers: slow enough per step to be
    killed mid-run."""
    files = {"train": str(head_jsonl(prepared_data / "rte" / "train.jsonl",
                                     folder / "rte_train.jsonl", 128)),
             "dev": str(head_jsonl(prepared_data / "rte" / "dev.jsonl",
                                   folder / "rte_dev.jsonl", 16))}
    config = folder / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "tasks": ["rte"], "task_files": {"rte": files}, "seeds": [3],
        "data_dir": str(prepared_data), "output_dir": str(folder / name),
        "arms": {"plain": None}, "train": {**KILL_KEYS, "cache_dir": str(folder / "cache")}}))
    return config


@pytest.fixture(scope="module")
def uninterrupted(prepared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the same run, never interrupted."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    ran = experiment(killable_grid(folder, prepared_data, "whole"))
    assert ran.returncode == 0, ran.stderr[-3000:]
    return folder / "whole/plain/rte/full/seed3"


def launch_and_wait_for_a_checkpoint(config: Path, run: Path,
                                     *extra: str) -> subprocess.Popen:
    """The grid launched in the background, its log in ``<config>.log``."""
    with config.with_suffix(".log").open("w") as log:
        launched = subprocess.Popen([sys.executable, "-m", "mtdnn.experiment", "--config",
                                     str(config), "--threads-per-job", "1", *extra], cwd=REPO,
                                    env=ENV, start_new_session=True, stdout=log, stderr=log)
    deadline = time.monotonic() + 600
    while not (run / "last" / "checkpoint.json").is_file():
        assert launched.poll() is None and time.monotonic() < deadline, "never saved"
        time.sleep(0.05)
    return launched


def worker_processes(launcher_pid: int) -> list[int]:
    """The launcher's pool workers (not its resource tracker), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == launcher_pid and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return found


def final_weights(run: Path) -> dict:
    from safetensors.torch import load_file

    last = run / "last"
    return {**load_file(last / "encoder" / "model.safetensors"),
            **{f"head.{k}": v for k, v in load_file(last / "heads.safetensors").items()}}


def assert_resumed_to(run: Path, original: Path, killed_at: int) -> None:
    """The resumed run's record and final weights are the uninterrupted run's."""
    record, whole = (json.loads((r / "result.json").read_text()) for r in (run, original))
    assert 0 < killed_at < KILL_KEYS["max_steps"]
    assert record["resumed_from_step"] >= killed_at
    assert record["metrics"] == whole["metrics"]
    assert record["steps"] == whole["steps"] == KILL_KEYS["max_steps"]
    mine, theirs = final_weights(run), final_weights(original)
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds workers in /proc")
def test_a_cell_whose_worker_is_killed_is_resumed_by_the_engine(
        prepared_data: Path, tmp_path: Path, uninterrupted: Path) -> None:
    """The local engine submits the job again to a fresh pool; it resumes from ``last``
    and ends with the uninterrupted run's metrics, in the same launch."""
    config = killable_grid(tmp_path, prepared_data, "killed")
    run = tmp_path / "killed/plain/rte/full/seed3"
    launched = launch_and_wait_for_a_checkpoint(config, run)
    workers = worker_processes(launched.pid)
    assert len(workers) == 1, workers
    os.kill(workers[0], signal.SIGKILL)  # the worker alone, mid-run: the launcher lives on
    killed_at = json.loads((run / "last" / "checkpoint.json").read_text())["step"]
    launched.wait(timeout=900)
    stderr = config.with_suffix(".log").read_text()
    assert launched.returncode == 0, stderr[-3000:]
    assert "its worker process died; submitted again (retry 1 of 3)" in stderr
    assert_resumed_to(run, uninterrupted, killed_at)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds workers in /proc")
def test_one_killed_local_worker_resubmits_its_job_alone(prepared_data: Path,
                                                         tmp_path: Path) -> None:
    """Two jobs at once, one worker killed: only its job is submitted again and spends a
    retry; the other runs on in its own worker, untouched."""
    config = killable_grid(tmp_path, prepared_data, "two")
    spec = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**spec, "seeds": [3, 4]}))
    runs = [tmp_path / f"two/plain/rte/full/seed{seed}" for seed in (3, 4)]
    launched = launch_and_wait_for_a_checkpoint(config, runs[0], "--jobs", "2")
    deadline = time.monotonic() + 120
    while len(workers := worker_processes(launched.pid)) < 2:
        assert time.monotonic() < deadline, workers
        time.sleep(0.05)
    os.kill(workers[0], signal.SIGKILL)
    launched.wait(timeout=900)
    stderr = config.with_suffix(".log").read_text()
    assert launched.returncode == 0, stderr[-3000:]
    assert stderr.count("its worker process died; submitted again") == 1, stderr[-3000:]
    assert "(retry 1 of 3)" in stderr and "retry 2" not in stderr
    assert all((run / "result.json").is_file() for run in runs)


def submitit_tasks(folder: Path) -> list[int]:
    """The processes of submitit's local executor that run a job logging to ``folder``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in words and str(folder).encode() in b" ".join(words):
            found.append(int(cmdline.parent.name))
    return found


def running_submitit_tasks(folder: Path) -> list[int]:
    """The job's task processes, once submitit's local executor has started them."""
    deadline = time.monotonic() + 60
    while not (tasks := submitit_tasks(folder)):
        assert time.monotonic() < deadline, "no submitit task found"
        time.sleep(0.05)
    return tasks


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds jobs in /proc")
def test_a_killed_submitit_job_is_retried_and_resumes(prepared_data: Path, tmp_path: Path,
                                                      uninterrupted: Path) -> None:
    """The Slurm launcher (submitit's local executor) submits a job that died again, up to
    max_retries; it resumes from ``last`` to the uninterrupted run's metrics."""
    config = killable_grid(tmp_path, prepared_data, "slurmkill")
    run = tmp_path / "slurmkill/plain/rte/full/seed3"
    launched = launch_and_wait_for_a_checkpoint(config, run, "--launcher", "slurm",
                                                "launcher.slurm.cluster=local")
    tasks = running_submitit_tasks(tmp_path / "slurmkill" / "slurm")
    os.kill(tasks[0], signal.SIGKILL)
    killed_at = json.loads((run / "last" / "checkpoint.json").read_text())["step"]
    launched.wait(timeout=900)
    stderr = config.with_suffix(".log").read_text()
    assert launched.returncode == 0, stderr[-3000:]
    assert "its job died" in stderr and "submitted again (retry 1 of 3)" in stderr
    assert_resumed_to(run, uninterrupted, killed_at)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds jobs in /proc")
@pytest.mark.parametrize("time_min, case, left", [(240, "preempted", 5), (3, "timed-out", 4)])
def test_a_signalled_submitit_job_is_requeued_and_resumes(
        time_min: int, case: str, left: int, prepared_data: Path, tmp_path: Path,
        uninterrupted: Path) -> None:
    """Slurm's warning signal (SIGUSR2) before a time limit or a pre-emption: submitit
    requeues the job, counting a time-out against max_requeues and a pre-emption not, and
    it is no retry of ours; the job resumes from ``last`` to the uninterrupted run's
    metrics. submitit judges the signal by the job's time used: with a limit of a few
    minutes it is a time-out at once, so the signal is sent (as the time limit's controller
    sends it) once a checkpoint exists, and the cut falls mid-run on any machine."""
    config = killable_grid(tmp_path, prepared_data, case)
    run = tmp_path / case / "plain/rte/full/seed3"
    launched = launch_and_wait_for_a_checkpoint(
        config, run, "--launcher", "slurm", "launcher.slurm.cluster=local",
        f"launcher.slurm.time_min={time_min}", "launcher.slurm.max_requeues=5")
    tasks = running_submitit_tasks(tmp_path / case / "slurm")
    os.kill(tasks[0], signal.SIGUSR2)
    killed_at = json.loads((run / "last" / "checkpoint.json").read_text())["step"]
    launched.wait(timeout=900)
    stderr = config.with_suffix(".log").read_text()
    assert launched.returncode == 0, stderr[-3000:]
    assert "submitted again" not in stderr  # submitit's requeue, not a retry
    job_log = "\n".join(f.read_text() for f in (tmp_path / case / "slurm").glob("*_log.err"))
    assert f"this job is {case}" in job_log and f"({left} remaining timeouts)" in job_log
    assert_resumed_to(run, uninterrupted, killed_at)


@pytest.mark.slow
def test_a_grid_killed_mid_run_resumes_when_launched_again(
        prepared_data: Path, tmp_path: Path, uninterrupted: Path) -> None:
    config = killable_grid(tmp_path, prepared_data, "killed")
    run = tmp_path / "killed/plain/rte/full/seed3"
    launched = launch_and_wait_for_a_checkpoint(config, run)
    os.killpg(launched.pid, signal.SIGKILL)  # the launcher and its worker, mid-run
    launched.wait()
    assert not (run / "result.json").exists(), "the run ended before it could be killed"
    killed_at = json.loads((run / "last" / "checkpoint.json").read_text())["step"]

    resumed = experiment(config)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_resumed_to(run, uninterrupted, killed_at)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds workers in /proc")
def test_a_worker_stops_when_its_launcher_is_stopped(
        prepared_data: Path, tmp_path: Path) -> None:
    """A launcher stopped by a signal (here SIGTERM, to it alone) takes its workers with
    it: an orphaned worker would train on beside the next launch's run of the same cell."""
    config = killable_grid(tmp_path, prepared_data, "orphaned")
    run = tmp_path / "orphaned/plain/rte/full/seed3"
    launched = launch_and_wait_for_a_checkpoint(config, run)
    workers = worker_processes(launched.pid)
    assert len(workers) == 1, workers
    launched.send_signal(signal.SIGTERM)
    launched.wait(timeout=60)
    stat = Path(f"/proc/{workers[0]}/stat")
    deadline = time.monotonic() + 30
    try:
        # gone, or ended and waiting to be reaped ("Z")
        while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the worker trained on after its launcher"
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(workers[0], signal.SIGKILL)
    assert not (run / "result.json").exists()


def test_a_slurm_job_at_its_time_limit_is_requeued_with_the_same_call() -> None:
    """submitit calls ``checkpoint`` at a time limit or pre-emption and requeues what it
    returns: the same call, which resumes the run from its ``last``."""
    import submitit

    from mtdnn.experiment.engines import Requeueable
    from mtdnn.experiment.jobs import run_job

    again = Requeueable(run_job).checkpoint("config", ("stage", "mt", 1), None, 2)
    assert isinstance(again, submitit.helpers.DelayedSubmission)
    assert isinstance(again.function, Requeueable) and again.function.fn is run_job
    assert again.args == ("config", ("stage", "mt", 1), None, 2)


@pytest.mark.parametrize("kind, message", [
    ("ray", "pip install 'mtdnn[ray]'"), ("slurm", "pip install 'mtdnn[slurm]'")])
def test_a_missing_engine_names_its_extra(kind: str, message: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from mtdnn.errors import MtdnnError
    from mtdnn.experiment.config import LauncherConfig
    from mtdnn.experiment.engines import Job, run_jobs

    monkeypatch.setitem(sys.modules, "ray" if kind == "ray" else "submitit", None)
    with pytest.raises(MtdnnError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_jobs(print, [Job("x", ())], LauncherConfig(kind=kind), tmp_path)


@pytest.mark.parametrize("keys, message", [
    (["--launcher", "ray", "launcher.ray.address=127.0.0.1:1"],
     "key 'launcher.ray.address': no Ray cluster answers at 127.0.0.1:1"),
    (["--launcher", "ray", "launcher.ray.address=auto"],
     "key 'launcher.ray.address': address auto: no running Ray cluster found on this machine"),
    (["--launcher", "slurm"],
     "key 'launcher.slurm.cluster': the slurm launcher found no Slurm here (no sbatch on "
     "PATH) (allowed: a machine with Slurm; launcher.slurm.cluster=local"),
])
def test_a_cluster_that_cannot_be_reached_is_refused_at_once_and_nothing_is_written(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path, keys: list[str],
        message: str) -> None:
    config = grid(tmp_path, prepared_data, tiny_encoder_dir, "unreached")
    started = time.monotonic()
    ran = subprocess.run([sys.executable, "-m", "mtdnn.experiment", "--config", str(config),
                          *keys], cwd=REPO, text=True, capture_output=True,
                         env={**ENV, "TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert time.monotonic() - started < 10  # the imports, then at once
    assert ran.returncode == 2, ran.stderr[-2000:]
    assert message in ran.stderr.strip().splitlines()[-1]
    assert "Traceback" not in ran.stderr
    assert not (tmp_path / "unreached").exists()  # no experiment_config.json, no folder
