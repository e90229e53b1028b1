"""Running jobs on an existing engine: local processes, Slurm (through ``submitit``) or Ray.

A job is a call of one importable function with picklable arguments, optionally after
another job. This module only says where it runs, with what resources, and in which
order; the engines own scheduling, retries and deadlines:

- ``local`` (default): ``jobs`` worker processes on this machine (the standard library's
  process pool). A job that waits for another is submitted once that one has ended. A job
  whose worker process dies (killed, out of memory) is submitted again, up to
  ``max_retries`` times, to a fresh pool; it resumes where it stopped when the function
  resumes. A worker whose launcher has gone (stopped by a signal, even SIGKILL) stops
  within seconds, so that no run trains on beside the next launch's run of it.
- ``slurm``: each job is a Slurm job submitted by ``submitit`` with the resources of
  ``slurm``. A job that reaches its time limit or is pre-empted is requeued by
  ``submitit`` with the same call (:class:`Requeueable`), which resumes where it stopped
  when the function resumes (mtdnn's training does, from ``last``). ``cluster: local``
  runs the same path in local processes (no Slurm needed).
- ``ray``: each job is a Ray task with the resources of ``ray``; a job that waits for
  another takes that one's result as an argument, so Ray orders them. ``address`` joins an
  existing cluster (``ray.init(address=...)``); none starts a local one. A task whose
  worker dies is retried by Ray.

A job that fails is reported with its error; the others run on. ``submitit`` and ``ray``
are optional extras (``pip install 'mtdnn[slurm]'``, ``'mtdnn[ray]'``), each imported
only by its engine.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import LauncherConfig, SlurmResources

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)  # each job is itself (its arguments need not hash)
class Job:
    """``fn(*args, <the result of after>)``: ``after`` is another job or None."""

    name: str
    args: tuple
    after: Job | None = None


@dataclass
class Outcome:
    """How one job ended: its result, or its error in one paragraph."""

    job: Job
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def describe_error(error: BaseException) -> str:
    """A user error as it prints; anything else with the frame it came from."""
    cause = getattr(error, "cause", None)  # Ray's RayTaskError wraps the job's own error
    if isinstance(cause, BaseException) and cause is not error:
        return describe_error(cause)
    if isinstance(error, MtdnnError):
        return error.format()
    lines = [line for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1:  # submitit's remote error: the job's traceback; its last line says it
        return lines[-1]
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def engine_package(name: str, launcher: str) -> Any:
    """The optional engine package a launcher needs, or an error naming its extra."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        others = " or ".join(k for k in ("local", "slurm", "ray") if k != launcher)
        raise MtdnnError(f"the {launcher} launcher needs {name}", key="launcher.kind",
                         allowed=f"pip install 'mtdnn[{launcher}]', or launcher "
                                 f"{others}") from None


def run_jobs(fn: Callable[..., Any], jobs: list[Job], launcher: LauncherConfig,
             log_dir: Path, on_end: Callable[[Outcome], None] = lambda outcome: None
             ) -> list[Outcome]:
    """Run ``fn`` for every job on ``launcher``'s engine, each after the job it names;
    a job whose ``after`` failed is not run. ``log_dir``: where Slurm jobs log."""
    engine = _ENGINES[launcher.kind](fn, launcher, log_dir)
    outcomes: list[Outcome] = []
    handles: dict[Job, Any] = {}
    running: dict[Any, Job] = {}
    waiting: dict[Job, list[Job]] = {}

    def end(outcome: Outcome) -> None:
        outcomes.append(outcome)
        on_end(outcome)
        for job in waiting.pop(outcome.job, []):
            if outcome.ok:
                submit(job)
            else:
                end(Outcome(job, error=f"{outcome.job.name} failed: {outcome.error}"))

    def submit(job: Job) -> None:
        handles[job] = engine.submit(job, handles.get(job.after))
        running[handles[job]] = job

    try:
        for job in jobs:
            if job.after is None or engine.orders_itself:
                submit(job)
            else:
                waiting.setdefault(job.after, []).append(job)
        while running:
            for handle in engine.ended(list(running)):
                job = running.pop(handle)
                again = engine.resubmitted(handle, job)
                if again is None:
                    end(engine.outcome(handle, job))
                else:
                    handles[job], running[again] = again, job
    finally:
        engine.close()
    return outcomes


def stop_with_launcher(launcher: int, every: float = 1.0) -> None:
    """A local worker's first call: end this process once its launcher has gone. The
    training it leaves resumes from its ``last`` checkpoint, which is written whole or not
    at all."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="stop-with-launcher").start()


class LocalEngine:
    """Up to ``jobs`` jobs at once, each slot a worker process of its own, started fresh (not
    forked from this one) and reused by the slot's next job: a worker that dies takes only
    its own job with it, and only that job is submitted again and spends a retry."""

    orders_itself = False

    def __init__(self, fn: Callable, launcher: LauncherConfig, log_dir: Path) -> None:
        import threading

        self.fn, self.threads, self.workers = fn, launcher.threads(), launcher.jobs
        self.max_retries, self.retries = launcher.max_retries, {}
        self.lock = threading.Lock()
        self.queued: list[tuple[Any, Job]] = []
        self.slots: list[Any] = [None] * self.workers  # each slot's one-worker pool
        self.active: dict[Any, int] = {}  # handle -> the slot running it

    def submit(self, job: Job, after: Any) -> Any:
        from concurrent.futures import Future

        handle: Future = Future()
        with self.lock:
            self.queued.append((handle, job))
        self.start_ready()
        return handle

    def start_ready(self) -> None:
        """Start queued jobs in the free slots."""
        while True:
            with self.lock:
                free = [i for i in range(self.workers) if i not in self.active.values()]
                if not free or not self.queued:
                    return
                handle, job = self.queued.pop(0)
                slot = free[0]
                if self.slots[slot] is None:
                    self.slots[slot] = self.new_pool()
                self.active[handle] = slot
                pool = self.slots[slot]
            work = pool.submit(self.fn, *job.args, None, self.threads)
            work.add_done_callback(lambda done, handle=handle: self.finished(handle, done))

    def new_pool(self) -> Any:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=stop_with_launcher, initargs=(os.getpid(),))

    def finished(self, handle: Any, done: Any) -> None:
        """A slot's job ended (or its worker died: the slot gets a fresh worker next); hand
        the outcome on and start the next job."""
        from concurrent.futures.process import BrokenProcessPool

        error = done.exception()
        with self.lock:
            slot = self.active.pop(handle)
            broken = self.slots[slot] if isinstance(error, BrokenProcessPool) else None
            if broken is not None:
                self.slots[slot] = None
        if broken is not None:
            broken.shutdown(wait=False)
        if error is not None:
            handle.set_exception(error)
        else:
            handle.set_result(done.result())
        self.start_ready()

    def resubmitted(self, handle: Any, job: Job) -> Any:
        """A job whose worker process died is submitted again, up to ``max_retries``
        times; the other jobs are not touched."""
        from concurrent.futures.process import BrokenProcessPool

        tries = self.retries.get(job, 0)
        if not isinstance(handle.exception(), BrokenProcessPool) or tries >= self.max_retries:
            return None
        self.retries[job] = tries + 1
        log.warning("%s: its worker process died; submitted again (retry %d of %d)",
                    job.name, tries + 1, self.max_retries)
        return self.submit(job, None)

    def ended(self, handles: list[Any]) -> Any:
        from concurrent.futures import FIRST_COMPLETED, wait

        return wait(handles, return_when=FIRST_COMPLETED).done

    def outcome(self, handle: Any, job: Job) -> Outcome:
        error = handle.exception()
        return Outcome(job, error=describe_error(error)) if error else \
            Outcome(job, result=handle.result())

    def close(self) -> None:
        with self.lock:
            self.queued.clear()
            pools = [pool for pool in self.slots if pool is not None]
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)


class Requeueable:
    """A ``submitit`` checkpointable call: at a time limit or a pre-emption, ``submitit``
    asks for a checkpoint and requeues what this returns, the same call."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def checkpoint(self, *args: Any) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(Requeueable(self.fn), *args)


def check_slurm_reachable(slurm: SlurmResources) -> None:
    """``cluster: auto`` on a machine without Slurm is an error, not a quiet fall-back to
    local processes (which would start every job at once)."""
    import shutil

    if slurm.cluster == "auto" and shutil.which("sbatch") is None:
        raise MtdnnError("the slurm launcher found no Slurm here (no sbatch on PATH)",
                         key="launcher.slurm.cluster",
                         allowed="a machine with Slurm; launcher.slurm.cluster=local to try "
                                 "the grid with submitit's local executor; or --launcher local")


def check_ray_reachable(address: str | None, timeout: float = 3.0) -> None:
    """A Ray cluster named by ``address`` answers, checked in seconds before anything is
    written (Ray itself retries an unreachable address for minutes). No address: a local
    cluster is started, nothing to check."""
    import socket

    if address is None:
        return
    allowed = ("a running cluster's address (ray start --head prints it), or no "
               "launcher.ray.address: a local Ray cluster on this machine")
    if address == "auto":
        import tempfile

        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if not os.environ.get("RAY_ADDRESS") and not current.is_file():
            raise MtdnnError("address auto: no running Ray cluster found on this machine",
                             key="launcher.ray.address", allowed=allowed)
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or address, int(port or 6379)), timeout=timeout):
            pass
    except (OSError, ValueError) as error:
        raise MtdnnError(f"no Ray cluster answers at {address} ({error})",
                         key="launcher.ray.address", allowed=allowed) from None


def check_launcher(launcher: LauncherConfig) -> None:
    """Refuse, before a grid writes anything, a launcher that cannot reach its cluster."""
    if launcher.kind == "slurm":
        check_slurm_reachable(launcher.slurm)
    elif launcher.kind == "ray":
        check_ray_reachable(launcher.ray.address)


class SubmititEngine(LocalEngine):
    """Each job a Slurm job (or, with ``cluster: local``, a local process)."""

    def __init__(self, fn: Callable, launcher: LauncherConfig, log_dir: Path) -> None:
        submitit = engine_package("submitit", "slurm")
        slurm = launcher.slurm
        check_slurm_reachable(slurm)
        self.fn, self.threads, self.submitit = fn, launcher.threads(), submitit
        self.max_retries, self.retries = launcher.max_retries, {}
        self.executor = self.executor_for(submitit, slurm.cluster, slurm.max_requeues, log_dir)
        self.poll = 1.0 if slurm.cluster == "local" else 30.0  # Slurm's queue: poll gently
        if slurm.cluster == "local":
            # submitit's local executor: the same jobs, signals and requeues on one machine
            self.executor.update_parameters(
                timeout_min=slurm.time_min, signal_delay_s=slurm.signal_delay_s)
            return
        extra = {"slurm_partition": slurm.partition} if slurm.partition else {}
        if slurm.extra:
            extra["slurm_additional_parameters"] = dict(slurm.extra)
        self.executor.update_parameters(
            name="mtdnn", timeout_min=slurm.time_min, cpus_per_task=launcher.slurm_cpus(),
            gpus_per_node=slurm.gpus_per_node, mem_gb=slurm.mem_gb,
            slurm_signal_delay_s=slurm.signal_delay_s, **extra)

    @staticmethod
    def executor_for(submitit: Any, cluster: str, max_requeues: int, log_dir: Path) -> Any:
        """Slurm's executor, or submitit's local one (which takes its requeue count and
        signal delay only when built by name: AutoExecutor passes them to Slurm alone)."""
        if cluster == "local":
            return submitit.LocalExecutor(folder=str(log_dir), max_num_timeout=max_requeues)
        return submitit.AutoExecutor(folder=str(log_dir), slurm_max_num_timeout=max_requeues,
                                     cluster="slurm")  # auto: checked to be Slurm above

    def submit(self, job: Job, after: Any) -> Any:
        return self.executor.submit(Requeueable(self.fn), *job.args, None, self.threads)

    def resubmitted(self, handle: Any, job: Job) -> Any:
        """A job that died without an outcome (killed, out of memory, its node lost) is
        submitted again, up to ``max_retries`` times; it resumes from its ``last``. A time
        limit or a pre-emption is submitit's own requeue, not a retry."""
        tries = self.retries.get(job, 0)
        try:
            handle.result()
        except self.submitit.core.utils.UncompletedJobError:
            if tries < self.max_retries:
                self.retries[job] = tries + 1
                log.warning("%s: its job died (%s); submitted again (retry %d of %d)",
                            job.name, handle.state, tries + 1, self.max_retries)
                return self.submit(job, None)
        except Exception:  # noqa: BLE001 - the job's own error: reported by outcome()
            pass
        return None

    def ended(self, handles: list[Any]) -> Any:
        return [next(iter(self.submitit.helpers.as_completed(handles,
                                                             poll_frequency=self.poll)))]

    def outcome(self, handle: Any, job: Job) -> Outcome:
        try:
            return Outcome(job, result=self.result(handle))
        except Exception as error:  # noqa: BLE001 - the engine re-raises the job's error
            return Outcome(job, error=f"{describe_error(error)} (its log: "
                                      f"{handle.paths.stderr})")

    def result(self, handle: Any) -> Any:
        return handle.result()

    def close(self) -> None:
        pass


class RayEngine(SubmititEngine):
    """Each job a Ray task; a job's ``after`` result is its argument, so Ray orders them
    (and fails it if that one failed)."""

    orders_itself = True

    def __init__(self, fn: Callable, launcher: LauncherConfig, log_dir: Path) -> None:
        ray = engine_package("ray", "ray")
        resources = launcher.ray
        self.ray, self.threads = ray, launcher.threads()
        self.started_here = not ray.is_initialized()
        if self.started_here:
            ray.init(address=resources.address, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
        memory = {"memory": int(resources.memory_gb * 2**30)} if resources.memory_gb else {}
        self.task = ray.remote(fn).options(num_cpus=resources.num_cpus,
                                           num_gpus=resources.num_gpus,
                                           max_retries=resources.max_retries, **memory)

    def submit(self, job: Job, after: Any) -> Any:
        return self.task.remote(*job.args, after, self.threads)

    def resubmitted(self, handle: Any, job: Job) -> Any:
        return None  # Ray retries a task whose worker died itself (ray.max_retries)

    def outcome(self, handle: Any, job: Job) -> Outcome:
        try:
            return Outcome(job, result=self.result(handle))
        except Exception as error:  # noqa: BLE001 - the engine re-raises the job's error
            return Outcome(job, error=describe_error(error))

    def ended(self, handles: list[Any]) -> Any:
        return self.ray.wait(handles, num_returns=1)[0]

    def result(self, handle: Any) -> Any:
        return self.ray.get(handle)  # a RayTaskError wraps the job's own error

    def close(self) -> None:
        if self.started_here:
            self.ray.shutdown()


_ENGINES = {"local": LocalEngine, "slurm": SubmititEngine, "ray": RayEngine}
