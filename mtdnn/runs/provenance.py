"""What a result depends on beyond its keys, kept in its record: the exact code (package
version, git commit, uncommitted changes) and the machine (CPU kernels, threads, torch,
GPU)."""

from __future__ import annotations

import contextlib
import functools
import platform
import subprocess
from pathlib import Path
from typing import Any

from mtdnn._version import __version__


@functools.cache
def code_version() -> dict[str, Any]:
    """The package version plus, where the package runs from a git checkout, its commit and
    whether the checkout had uncommitted changes: enough to find the code of a record."""
    found: dict[str, Any] = {"package": __version__}
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return found
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no"], check=True, capture_output=True,
                                text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return found
    return {**found, "commit": commit, "dirty": bool(status.strip())}


def machine_description() -> dict[str, object]:
    """What a run's numbers depend on beyond its keys: fp32 results differ in their last bits
    between CPU kernels (AVX2, AVX512) and between torch thread counts, so a stage
    re-trained elsewhere is another realization of the same stage (``mtdnn.experiment``)."""
    import torch  # (records are read without torch; only a run describes its machine)

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def this_process(from_step: int) -> dict[str, Any]:
    """An entry of a run's ``trained_by``: this process trains it from ``from_step`` on,
    with this code on this machine."""
    return {"from_step": from_step, "code_version": code_version(),
            "machine": machine_description()}
