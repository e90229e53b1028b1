"""The package version, and the exact code a record was made with."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

__version__ = "0.1.0"


@functools.cache
def code_version() -> dict[str, Any]:
    """The package version plus, where the package runs from a git checkout, its commit and
    whether the checkout had uncommitted changes: enough to find the code of a record."""
    found: dict[str, Any] = {"package": __version__}
    root = Path(__file__).resolve().parent.parent
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
