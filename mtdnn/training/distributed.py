"""More than one process: ``torchrun --nproc_per_node N train.py ...``.

Every rank builds the same sampler from the same seed, so at every step all ranks draw the
same task and the same global batch; each rank takes its contiguous share of the batch's
rows. Each rank's losses are weighted by its share of the batch and the gradients are
summed across ranks, so the update equals that of one process on the whole global batch
(``batch_size`` is the global batch). The sum is ``DistributedDataParallel``'s all-reduce,
overlapped with the backward pass (with ``find_unused_parameters``: heads of the tasks not
in a step get no gradient), except in runs whose step does not fit DDP (SMART's R_s,
PCGrad; see ``mtdnn.training.trainer``), which sum by hand after backward. Only rank 0 evaluates,
logs and writes checkpoints.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from mtdnn.errors import MtdnnError
from mtdnn.modeling.precision import resolve_precision

if TYPE_CHECKING:
    from mtdnn.config.train_config import TrainConfig


@dataclass(frozen=True)
class Distributed:
    """This process's place among the training processes."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")  # CUDA (this rank's GPU) where present

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (filling a cache, say) while the other ranks wait;
        then they run it (reading what rank 0 wrote)."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-reduce (sum) in place; a no-op for one process."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def sum_gradients(self, model: torch.nn.Module) -> None:
        """Sum every parameter gradient across ranks, in one flat buffer."""
        if not self.enabled:
            return
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def wrap(self, model: torch.nn.Module, summed_by_hand: bool) -> torch.nn.Module | None:
        """``model`` in ``DistributedDataParallel`` (gradients averaged across ranks); none in
        one process, or where the gradients are ``summed_by_hand`` (:meth:`sum_gradients`)."""
        from torch.nn.parallel import DistributedDataParallel

        if not self.enabled or summed_by_hand:
            return None
        devices = [self.local_rank] if next(model.parameters()).is_cuda else None
        return DistributedDataParallel(model, device_ids=devices,
                                       find_unused_parameters=True)

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        """Start every rank from rank 0's weights."""
        if self.enabled:
            for tensor in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(tensor.data, src=0)


ONE_PROCESS = Distributed()


def init_distributed(device_kind: str) -> Distributed:
    """Join the process group that ``torchrun`` describes in the environment (gloo on CPU,
    nccl on CUDA); one process without it."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed(device=torch.device("cuda:0" if device_kind == "cuda" else "cpu"))
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    if device_kind == "cuda":
        torch.cuda.set_device(local_rank)
        return Distributed(rank, world_size, local_rank, torch.device(f"cuda:{local_rank}"))
    return Distributed(rank, world_size, local_rank)


def start_distributed(config: TrainConfig) -> Distributed:
    """This process's place and device for a run of ``config`` (CUDA when present)."""
    return init_distributed("cuda" if use_cuda(config) else "cpu")


def shutdown(distributed: Distributed) -> None:
    """Leave the process group, once whatever held it (a DDP wrapper the caller dropped) is
    freed."""
    if distributed.enabled and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def use_cuda(config: TrainConfig) -> bool:
    if config.device == "cuda" and not torch.cuda.is_available():
        raise MtdnnError("CUDA was requested but is not available", key="device",
                         allowed="auto, cpu")
    return config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())


def choose_device(config: TrainConfig, local_rank: int = 0) -> tuple[torch.device, str]:
    """The run's device (CUDA when present) and its resolved precision (``auto``: the
    device's native bf16/fp16, fp32 on CPUs without bf16 or where SMART's ε needs it)."""
    cuda = use_cuda(config)
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    return device, resolve_precision(config.precision, device, config.smart)
