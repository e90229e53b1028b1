"""Which device and which arithmetic a run uses, decided once and recorded.

``precision: auto`` means bf16 autocast where the hardware does bf16 natively (CUDA with
bf16, else fp16; a CPU with AVX512-BF16 or AMX, or an Arm CPU with the BF16 extension) and
fp32 elsewhere. On a CPU that only emulates bf16 it is slower than fp32, so auto does not
pick it there. Losses, softmaxes and the SMART divergences are computed in fp32 whatever
the precision (``mtdnn.tasks.types``, ``mtdnn.modeling.smart``).

One rule protects SMART: a perturbation smaller than bf16's rounding of the embedding
output is not a perturbation. bf16 keeps 8 significant bits, so after the embedding
LayerNorm (values of order 1) a change below ~4e-3 flips a few coordinates by one
rounding step instead of moving all of them a little: at the paper's ε = 1e-5, R_s measured
4× larger in bf16 than in fp32, while from ε = 1e-3 up the two agree within ~10%
(``python -m mtdnn.smart_probe`` prints both). So R_s with ε below
:data:`BF16_MIN_EPSILON` runs in fp32: ``auto`` picks fp32 for such a run (and says why),
and an explicit ``precision: bf16`` is an error naming both keys.
"""

from __future__ import annotations

import contextlib
import logging
import platform
from pathlib import Path

import torch

from mtdnn.errors import MtdnnError

log = logging.getLogger(__name__)

AMP_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16,
                                               "fp16": torch.float16}
BF16_MIN_EPSILON = 1e-3


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX on x86, the BF16
    extension on Arm); read at run time, since the same code runs on many machines."""
    cpu = getattr(torch, "cpu", None)
    for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        probe = getattr(cpu, check, None)
        if probe is not None and probe():
            return True
    if platform.machine().lower() in ("aarch64", "arm64"):
        with contextlib.suppress(OSError):
            flags = Path("/proc/cpuinfo").read_text().split()
            return "bf16" in flags
    return False


def native_precision(device: torch.device) -> str:
    """The fastest precision this device runs natively."""
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def smart_epsilon_needing_fp32(smart) -> float | None:
    """The run's SMART radius if R_s is on with a radius that bf16 would round away."""
    if smart is None or not smart.enabled or not smart.adv_weight or smart.ascent != "paper":
        return None  # (the reference ascent's perturbation is ~1 per token, not ε)
    return smart.epsilon if smart.epsilon < BF16_MIN_EPSILON else None


def resolve_precision(requested: str, device: torch.device, smart=None) -> str:
    """``fp32``, ``bf16`` or ``fp16`` for a run that asked for ``requested``."""
    epsilon = smart_epsilon_needing_fp32(smart)
    if requested == "auto":
        chosen = native_precision(device)
        if chosen != "fp32" and epsilon is not None:
            log.info("precision auto: fp32, not %s: smart.epsilon %g is below the %g that "
                     "%s rounding leaves visible", chosen, epsilon, BF16_MIN_EPSILON, chosen)
            return "fp32"
        return chosen
    if requested != "fp32" and epsilon is not None:
        raise MtdnnError(f"smart.epsilon {epsilon:g} is below what {requested} can represent "
                         f"as a perturbation of the embeddings ({BF16_MIN_EPSILON:g})",
                         key="precision", allowed=f"precision=fp32 (or auto), or "
                                                  f"smart.epsilon >= {BF16_MIN_EPSILON:g}")
    return requested


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype`` on ``device``, or a no-op for full precision."""
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def inference_device() -> tuple[torch.device, str]:
    """CUDA when present, else CPU; with the precision ``auto`` picks there."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return device, native_precision(device)
