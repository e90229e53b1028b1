"""Strict reading of tab-separated files in the GLUE / SciTail layout.

Fields are split on tabs with no quote processing (GLUE's ``QUOTE_NONE`` convention: the
texts contain bare ``"`` characters). A leading UTF-8 BOM is dropped. Every row must
have exactly as many fields as the header.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from mtdnn.errors import MtdnnError
from mtdnn.files import not_utf8


def read_tsv(path: Path, header: Sequence[str] | None = None
             ) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """Return ``(column names, rows)``; ``rows`` yields ``(line number, fields)``.

    With ``header=None`` the first line is the header; otherwise the file has no header
    and ``header`` names its columns.
    """
    handle = open(path, encoding="utf-8-sig", newline="")
    lines = _decoded(enumerate(handle, start=1), path)
    if header is None:
        try:
            _, first = next(lines)
        except StopIteration:
            handle.close()
            raise MtdnnError("the file is empty; expected a header line", file=path) from None
        columns = first.rstrip("\r\n").split("\t")
    else:
        columns = list(header)

    def rows() -> Iterator[tuple[int, list[str]]]:
        with handle:
            for number, line in lines:
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                fields = line.split("\t")
                if len(fields) != len(columns):
                    raise MtdnnError(
                        f"found {len(fields)} tab-separated fields, expected {len(columns)}",
                        file=path, line=number, allowed=f"columns {', '.join(columns)}")
                yield number, fields

    return columns, rows()


def _decoded(lines: Iterator[tuple[int, str]], path: Path) -> Iterator[tuple[int, str]]:
    """``lines``, with a byte that is not UTF-8 reported by file, line and offset."""
    while True:
        try:
            yield next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError:
            raise not_utf8(path) from None


def column_index(columns: list[str], name: str, path: Path) -> int:
    """Position of a column found by header name; a missing column names what is there."""
    try:
        return columns.index(name)
    except ValueError:
        raise MtdnnError(f"missing column '{name}'", file=path, line=1,
                         allowed=f"a header with {name!r}; found {', '.join(columns)}") from None
