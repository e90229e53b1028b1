"""The one user-facing error type and its formatting.

A user error names where it happened (file, line or key), what was found and what is
allowed. Command-line entry points print it as one paragraph and exit non-zero, without
a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

USER_ERROR_EXIT_CODE = 2


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


def run_cli(main: Callable[[list[str] | None], T], argv: list[str] | None = None) -> T:
    """Run a CLI ``main``, turning :class:`MtdnnError` into a message and exit code 2.

    ``--debug`` anywhere in argv re-raises with the full traceback instead.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
    try:
        return main(args)
    except MtdnnError as error:
        if debug:
            raise
        print(f"error: {error.format()}", file=sys.stderr)
        raise SystemExit(USER_ERROR_EXIT_CODE) from None
