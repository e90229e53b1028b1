"""The training metrics a run logs: every ``log_every_steps`` updates, the means of what the
steps gathered since the last line (each task's loss and SMART terms), with the learning
rate, the gradient norm and the skip counters."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from mtdnn.runs.run_dir import RunDir
    from mtdnn.runs.run_state import RunState
    from mtdnn.runs.trackers import Trackers
    from mtdnn.training.distributed import Distributed

log = logging.getLogger(__name__)


class MetricLog:
    """Writes the means to the trackers and ``metrics.jsonl`` (one line per task, rank 0),
    to the progress bar, and without a bar a log line every tenth of the run that names the
    run (grids run many at once). Every rank takes part: the losses are summed across ranks,
    each holding its share of the batch's."""

    def __init__(self, trackers: Trackers, run: RunDir, distributed: Distributed,
                 total_steps: int, log_every_steps: int, progress_bar: bool) -> None:
        self.trackers, self.run, self.distributed = trackers, run, distributed
        self.total_steps, self.log_every_steps = total_steps, log_every_steps
        self.progress_bar = progress_bar

    def due(self, step: int) -> bool:
        return step % self.log_every_steps == 0 or step == self.total_steps

    def log(self, state: RunState, progress: tqdm, lr: float, grad_norm: torch.Tensor,
            teacher_start_share: float | None) -> None:
        """The means since the last call (``state.running``, emptied), at ``state.step``."""
        means = self.means(state)
        progress.set_postfix({k.split("/")[0]: f"{v:.3f}" for k, v in means.items()
                              if k.endswith("/loss")}, refresh=False)
        step, tenth = state.step, max(1, self.total_steps // 10)
        main = self.distributed.is_main
        if not self.progress_bar and main and (
                step // tenth > (step - self.log_every_steps) // tenth
                or step == self.total_steps):
            log.info("%s: step %d of %d, loss %s", self.run.path, step, self.total_steps,
                     ", ".join(f"{k.split('/')[0]} {v:.3f}" for k, v in means.items()
                               if k.endswith("/loss")))
        if main:
            self.record(state, means, lr, float(grad_norm), teacher_start_share)

    def means(self, state: RunState) -> dict[str, float]:
        """Each gathered value's mean since the last line; the losses summed across ranks."""
        means = {}
        for key, values in sorted(state.running.items()):
            mean = torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in values]).mean()
            if key.endswith("/loss"):  # each rank holds its share of the batch's loss
                mean = self.distributed.sum_(mean.to(self.distributed.device))
            means[key] = float(mean)
        state.running.clear()
        return means

    def record(self, state: RunState, means: dict[str, float], lr: float, grad_norm: float,
               teacher_start_share: float | None) -> None:
        step, adv_skipped = state.step, int(state.adv_skipped)
        for name, value in (("lr", lr), ("grad_norm", grad_norm),
                            ("adv_skipped", adv_skipped),
                            ("nonfinite_skipped", state.nonfinite_skipped)):
            self.trackers.add_scalar(f"train/{name}", value, step)
        by_task: dict[str, dict[str, float]] = {}
        for key, value in means.items():
            self.trackers.add_scalar(f"train/{key}", value, step)
            task, name = key.split("/")
            by_task.setdefault(task, {})[name] = value
        teacher = {}
        if teacher_start_share is not None:
            teacher = {"teacher_start_share": teacher_start_share}
            self.trackers.add_scalar("train/teacher_start_share", teacher_start_share, step)
        for task in sorted(by_task):
            self.trackers.record({"kind": "train", "step": step, "epoch": state.epoch,
                                  "task": task, "lr": lr, "adv_skipped": adv_skipped,
                                  **teacher, **by_task[task]})
