"""AdamW parameter groups (weight decay, layer-wise LR decay), learning-rate schedules, and
the update step that uses them (:class:`Updater`).

Schedules come from ``transformers`` where it has them (linear, cosine, constant, all with
linear warm-up); the slanted triangular schedule of Howard & Ruder (2018) is a
``LambdaLR``: a linear rise over ``warmup_ratio`` of the steps to the peak, then a linear
fall to peak / ``stlr_ratio``.
"""

from __future__ import annotations

import logging
import math
import re
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from transformers import (
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_linear_schedule_with_warmup,
)

from mtdnn.config.train_config import OptimizerConfig
from mtdnn.errors import MtdnnError

if TYPE_CHECKING:
    from mtdnn.runs.run_dir import RunDir
    from mtdnn.runs.run_state import RunState
    from mtdnn.training.distributed import Distributed

log = logging.getLogger(__name__)

LAYER = re.compile(r"\.layers?\.(\d+)\.")


def layer_of(name: str, num_layers: int) -> int:
    """Depth of a parameter: 0 for embeddings, l + 1 for encoder layer l, num_layers + 1 for
    everything above the layers (pooler, heads)."""
    match = LAYER.search(name)
    if match:
        return int(match.group(1)) + 1
    if name.startswith("encoder.") and "embeddings" in name:
        return 0
    return num_layers + 1


def build_optimizer(model: nn.Module, config: OptimizerConfig, fused: bool = True
                    ) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases and LayerNorm weights (the 1-D parameters); with
    ``layer_lr_decay`` each depth d gets lr · decay^(top - d). ``fused=False``: torch's
    per-tensor loop instead of its fused kernels (what those are measured against)."""
    num_layers = getattr(getattr(model, "encoder", None), "config", None)
    num_layers = getattr(num_layers, "num_hidden_layers", 0) or 0
    groups: dict[tuple[int, bool], list[nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        depth = layer_of(name, num_layers) if config.layer_lr_decay else 0
        groups.setdefault((depth, param.ndim > 1), []).append(param)
    top = num_layers + 1
    param_groups = [{"params": params, "weight_decay": config.weight_decay if decay else 0.0,
                     "lr": config.lr * (config.layer_lr_decay ** (top - depth)
                                        if config.layer_lr_decay else 1.0)}
                    for (depth, decay), params in sorted(groups.items())]
    settings = {"lr": config.lr, "betas": tuple(config.adam_betas), "eps": config.adam_eps}
    if not fused:
        return torch.optim.AdamW(param_groups, foreach=False, **settings)
    try:
        # One fused kernel for all parameters: on CPU an update takes a fifth of the time
        # of torch's default per-tensor loop (benchmarks/optimizer_step.py), as Trainer's
        # default adamw_torch_fused does.
        return torch.optim.AdamW(param_groups, fused=True, **settings)
    except RuntimeError:  # parameters on a device without fused kernels
        return torch.optim.AdamW(param_groups, **settings)


def slanted_triangular(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int,
                       ratio: float) -> LambdaLR:
    """Howard & Ruder (2018), eq. 3: rise to the peak, then fall to peak / ratio."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            p = step / max(1, warmup_steps)
        else:
            p = 1 - (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return (1 + max(0.0, p) * (ratio - 1)) / ratio

    return LambdaLR(optimizer, factor)


SCHEDULES = {
    "linear": lambda opt, warmup, total, config: get_linear_schedule_with_warmup(
        opt, warmup, total),
    "cosine": lambda opt, warmup, total, config: get_cosine_schedule_with_warmup(
        opt, warmup, total),
    "constant": lambda opt, warmup, total, config: get_constant_schedule_with_warmup(
        opt, warmup),
    "slanted_triangular": lambda opt, warmup, total, config: slanted_triangular(
        opt, warmup, total, config.stlr_ratio),
}


def build_scheduler(optimizer: torch.optim.Optimizer, config: OptimizerConfig,
                    total_steps: int) -> LambdaLR:
    """The learning-rate schedule ``config.schedule`` over ``total_steps`` updates."""
    warmup = config.warmup_steps if config.warmup_steps is not None else \
        int(config.warmup_ratio * total_steps)
    if warmup >= total_steps > 0:
        log.warning("optimizer.warmup_steps %d is not shorter than the run's %d steps: the "
                    "learning rate never reaches optimizer.lr (at most %.1f%% of it); set "
                    "warmup_steps below %d, or warmup_ratio instead", warmup, total_steps,
                    100 * total_steps / warmup, total_steps)
    return SCHEDULES[config.schedule](optimizer, warmup, total_steps, config)


def build_optimization(model: nn.Module, config: OptimizerConfig, total_steps: int,
                       precision: str, saved: dict[str, Any] | None = None,
                       extended: dict[str, tuple[Any, Any]] | None = None
                       ) -> tuple[torch.optim.AdamW, LambdaLR, torch.amp.GradScaler]:
    """The optimizer, its schedule over ``total_steps`` and the gradient scaler (active in
    fp16 only); a resumed run's as ``saved`` (its training state) holds them."""
    optimizer = build_optimizer(model, config)
    scheduler = build_scheduler(optimizer, config, total_steps)
    device = next(model.parameters()).device
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    if saved:
        resume_optimization(optimizer, scheduler, total_steps, saved, extended or {})
        scaler.load_state_dict(saved["scaler"])
    return optimizer, scheduler, scaler


def resume_optimization(optimizer: torch.optim.Optimizer, scheduler: LambdaLR, total_steps: int,
                        saved: dict[str, Any], extended: dict[str, tuple[Any, Any]]) -> None:
    """The optimizer and schedule of a resumed run as ``saved`` (its training state) holds
    them; after the schedule is built, whose first step sets the learning rates afresh. A
    run ``extended`` (keys made longer, as (saved, now)) follows the longer schedule from
    the step it reached."""
    optimizer.load_state_dict(saved["optimizer"])
    use_own_kernels(optimizer)
    scheduler.load_state_dict(saved["scheduler"])
    if extended:
        log.info("extending the run (%s) to %d steps: from step %d the learning rate follows "
                 "the %d-step schedule (now %.3g)", ", ".join(
                     f"{key} {old} → {new}" for key, (old, new) in extended.items()),
                 total_steps, scheduler.last_epoch + 1, total_steps,
                 follow_new_schedule(optimizer, scheduler))


def use_own_kernels(optimizer: torch.optim.Optimizer) -> None:
    """Loaded state names the implementation that saved it (a run saved before fused
    kernels were used names the per-tensor loop): the run goes on with this optimizer's,
    each step count where the fused kernel reads it (on the parameter's device)."""
    fused = optimizer.defaults.get("fused")
    for group in optimizer.param_groups:
        group["fused"], group["foreach"] = fused, optimizer.defaults.get("foreach")
        for param in group["params"] if fused else ():
            state = optimizer.state.get(param, {})
            if torch.is_tensor(state.get("step")):
                state["step"] = state["step"].to(param.device, torch.float32)


def follow_new_schedule(optimizer: torch.optim.Optimizer, scheduler: LambdaLR) -> float:
    """A resumed run made longer: from the step it reached, the learning rates follow this
    (longer) schedule rather than the saved one; returns the first group's new rate."""
    for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs,
                                   scheduler.lr_lambdas, strict=True):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    return optimizer.param_groups[0]["lr"]


class Updater:
    """One optimizer update per :meth:`step`: unscale (fp16), clip the gradient norm to
    ``max_grad_norm``, step, schedule. A non-finite gradient norm (the one value brought to
    the host each update) drops the update after the minibatches' losses are checked: a
    non-finite task loss stops the run, naming the task, the step and the last good
    checkpoint of ``run``."""

    def __init__(self, optimizer: torch.optim.Optimizer, scheduler: LambdaLR,
                 scaler: torch.amp.GradScaler, max_grad_norm: float, distributed: Distributed,
                 run: RunDir) -> None:
        self.optimizer, self.scheduler, self.scaler = optimizer, scheduler, scaler
        self.max_grad_norm, self.distributed, self.run = max_grad_norm, distributed, run
        self.grad_norm = torch.zeros(())  # the last update's, before clipping

    @property
    def lr(self) -> float:
        """The first parameter group's learning rate for the next update."""
        return self.scheduler.get_last_lr()[0]

    def step(self, model: nn.Module, losses: list[tuple[str, torch.Tensor]],
             state: RunState) -> bool:
        """Update ``model`` from its gradients (``losses``: each minibatch's task and loss);
        ``False`` when the gradient was not finite and the update was dropped."""
        self.scaler.unscale_(self.optimizer)
        self.grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm)
        if not torch.isfinite(self.grad_norm):
            self.check_finite_losses(losses, state.step)
            if not self.scaler.is_enabled():  # (fp16's GradScaler skips the step itself)
                self.optimizer.zero_grad(set_to_none=True)
                state.nonfinite_skipped += 1
                return False
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        state.step += 1
        return True

    def check_finite_losses(self, losses: list[tuple[str, torch.Tensor]], step: int) -> None:
        """A non-finite task loss stops the run, naming the task and the step."""
        for task, loss in losses:
            value = self.distributed.sum_(loss.detach().clone()).item()
            if not math.isfinite(value):
                last = self.run.last
                kept = (f"the last good checkpoint is {last}" if last.is_dir()
                        else "no checkpoint was written yet")
                raise MtdnnError(f"the loss of task '{task}' is {value} at step {step + 1}; "
                                 f"{kept}", file=self.run.path,
                                 allowed="a lower optimizer.lr, or precision=fp32")
