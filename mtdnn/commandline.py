"""What every command shares: its parser (usage named as the user called it, help text
without source markup), ``--debug``, logging, and one way of ending on an error.

Each command prints one paragraph for an error caused by input and exits with 2
(``--debug`` shows the traceback); Ctrl-C prints one line and exits with 130.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mtdnn.errors import INTERRUPTED_EXIT_CODE, USER_ERROR_EXIT_CODE, MtdnnError, is_disk_full

T = TypeVar("T")


def plain_text(doc: str | None) -> str:
    """A docstring as help text: ``code`` and :role:`target` markup shown as plain text."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc or "")
    return text.replace("``", "").replace("\\\n", "\n")


def command_parser(module: str, doc: str | None, **kwargs) -> argparse.ArgumentParser:
    """A command's parser: usage as the user called it (``mtdnn-export``, or ``python -m
    mtdnn.inference.export``), the module's docstring as plain help text."""
    called = Path(sys.argv[0]).name
    prog = called if called.startswith("mtdnn-") else f"python -m {module}"
    return argparse.ArgumentParser(prog=prog, description=plain_text(doc),
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   **kwargs)


def parsed_with_logging(parser: argparse.ArgumentParser,
                        argv: list[str] | None) -> argparse.Namespace:
    """A ``key=value`` command's arguments (its flags may sit among the overrides), with
    its progress logged at INFO in the one format the commands share."""
    args = parser.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    return args


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """``--debug`` in a command's help (:func:`run_cli` reads it wherever it appears)."""
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error")


def run_cli(main: Callable[[list[str] | None], T], argv: list[str] | None = None) -> T:
    """Run a CLI ``main``, turning :class:`MtdnnError` into a message and exit code 2.

    Ctrl-C prints one line and exits with 130; a full disk met outside mtdnn's own writers
    is still one line. ``--debug`` anywhere in argv re-raises with the full traceback.
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
