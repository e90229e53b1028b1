"""The one user-facing error type and its formatting.

A user error names where it happened (file, line or key), what was found and what is
allowed. Command-line entry points print it as one paragraph and exit non-zero, without
a traceback unless ``--debug`` is given (:mod:`mtdnn.commandline`).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

USER_ERROR_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what shells report for Ctrl-C


class MtdnnError(Exception):
    """An error caused by the user's input, with enough context to fix it."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        key: str | None = None,
        allowed: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = str(file) if file is not None else None
        self.line = line
        self.key = key
        self.allowed = allowed
        super().__init__(self.format())

    def format(self) -> str:
        """Render as ``file:line: key 'k': problem (allowed: ...)``."""
        where = []
        if self.file is not None:
            where.append(self.file if self.line is None else f"{self.file}:{self.line}")
        if self.key is not None:
            where.append(f"key '{self.key}'")
        text = ": ".join(where + [self.problem]) if where else self.problem
        if self.allowed:
            text += f" (allowed: {self.allowed})"
        return text


class Interrupted(MtdnnError):
    """Ctrl-C, reported in one line with what survives (e.g. how to resume)."""

    exit_code = INTERRUPTED_EXIT_CODE


DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
DISK_FULL_WORDS = ("No space left on device", "File too large", "Disk quota exceeded")


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk (or the file-size limit) is full, whatever library
    raised it: Python's OSError, safetensors' and torch's own error types."""
    if isinstance(error, OSError) and error.errno in DISK_FULL:
        return True
    return any(words in str(error) for words in DISK_FULL_WORDS)


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for a close match among ``choices``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
