"""The one user-facing error type and its formatting.

A user error names where it happened (file, line or key), what was found and what is
allowed. Command-line entry points print it as one paragraph and exit non-zero, without
a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for a close match among ``choices``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def add_debug_flag(parser: Any) -> None:
    """``--debug`` in a command's help (:func:`run_cli` reads it wherever it appears)."""
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error")


def run_cli(main: Callable[[list[str] | None], T], argv: list[str] | None = None) -> T:
    """Run a CLI ``main``, turning :class:`MtdnnError` into a message and exit code 2.

    Ctrl-C prints one line and exits with 130; a full disk met outside mtdnn's own writers
    is still one line. ``--debug`` anywhere in argv re-raises with the full traceback.
    """
    from mtdnn.files import is_disk_full

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
        raise SystemExit(getattr(error, "exit_code", USER_ERROR_EXIT_CODE)) from None
    except KeyboardInterrupt:
        if debug:
            raise
        print("error: interrupted; outputs are written whole or not at all, so nothing "
              "half-written was left", file=sys.stderr)
        raise SystemExit(INTERRUPTED_EXIT_CODE) from None
    except Exception as error:
        if debug or not is_disk_full(error):
            raise
        where = getattr(error, "filename", None)
        print(f"error: {where or 'a file being written'}: cannot write: the disk is full (or "
              "the file-size limit was reached) (allowed: free some space, or write "
              "somewhere else)", file=sys.stderr)
        raise SystemExit(USER_ERROR_EXIT_CODE) from None
