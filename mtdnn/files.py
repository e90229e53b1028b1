"""Small file helpers shared by data preparation, training, inference and the experiment
runner.

Every file mtdnn writes for a user goes through a temporary name and a rename, so a crash
never leaves a half-written file behind.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mtdnn.errors import MtdnnError, is_disk_full


def sha256_of(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unchanged_stamp(path: str | Path) -> tuple[str, int, int]:
    """What names a file's content while it stays unchanged: its resolved path (one relative
    path from two folders is two files), size and modification time. The key of the
    per-process caches of what mtdnn reads from files."""
    stat = os.stat(path)
    return str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns


def not_utf8(path: str | Path) -> MtdnnError:
    """The error for a file that is not UTF-8 text: where the first bad byte is, and what
    the file looks like instead (a UTF-16 export, say)."""
    data = Path(path).read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return MtdnnError("the file is UTF-16 text, not UTF-8", file=path,
                          allowed="UTF-8 text: re-save the file as UTF-8")
    try:
        data.decode("utf-8")
        offset = len(data)
    except UnicodeDecodeError as error:
        offset = error.start
    line = data.count(b"\n", 0, offset) + 1
    return MtdnnError(f"not UTF-8 text: byte 0x{data[offset]:02x} at byte offset {offset}"
                      if offset < len(data) else "not UTF-8 text", file=path, line=line,
                      allowed="UTF-8 text: re-save the file as UTF-8")


def read_text(path: str | Path) -> str:
    """A UTF-8 text file's contents; a missing or undecodable file is a user error."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except OSError as error:
        raise MtdnnError(f"cannot read file: {error.strerror}", file=path) from None


def read_json(path: str | Path) -> Any:
    """A JSON file (a manifest, a result record); a truncated or edited one names the line."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise MtdnnError(f"invalid JSON: {error.msg} (a truncated or hand-edited file?)",
                         file=path, line=error.lineno,
                         allowed="the file as mtdnn wrote it; delete it to rebuild it") from None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` from a JSON-lines file; bad JSON names the line."""
    path = Path(path)
    try:
        handle = open(path, encoding="utf-8")
    except OSError as error:
        raise MtdnnError(f"cannot read file: {error.strerror}", file=path) from None
    with handle:
        lines = enumerate(handle, start=1)
        while True:
            try:
                number, line = next(lines)
            except StopIteration:
                return
            except UnicodeDecodeError:
                raise not_utf8(path) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as error:
                raise MtdnnError(f"invalid JSON: {error.msg}", file=path, line=number) from None
            if not isinstance(obj, dict):
                raise MtdnnError("expected a JSON object per line", file=path, line=number)
            yield number, obj


def write_error(path: Path, error: BaseException) -> MtdnnError:
    """A failed write as a user error: a file in the way, a full disk, no permission."""
    if isinstance(error, (NotADirectoryError, FileExistsError)) or (
            isinstance(error, OSError) and error.errno in (errno.ENOTDIR, errno.EEXIST)):
        blocker = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()),
                       path)
        return MtdnnError(f"cannot write here: {blocker} is a file, not a folder", file=path,
                          allowed="a path whose folders are folders")
    if is_disk_full(error):
        return MtdnnError("cannot write: the disk is full (or the file-size limit was "
                          "reached); nothing earlier was changed", file=path,
                          allowed="free some space, or write somewhere else")
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return MtdnnError(f"cannot write: {reason}", file=path,
                      allowed="a path you can write to")


def check_output(path: Path, inputs: list[Path], *, key: str, overwrite: bool,
                 folder: bool = False) -> None:
    """Refuse, before any work, an output that would destroy data the command did not
    create: one of its inputs (or inside or around one), or an existing file or folder
    the user did not ask to replace."""
    target = path.resolve()
    for source in inputs:
        source = source.resolve()
        if target == source or target.is_relative_to(source) or (
                folder and source.is_relative_to(target)):
            raise MtdnnError(f"the output would overwrite an input ({source})", file=path,
                             key=key, allowed="an output path apart from every input")
    if folder:
        check_output_folder(path, key, allowed="a new folder")
    else:
        check_output_parent(path)
    if not folder and path.is_dir():
        raise MtdnnError("the output is a folder; a file is written here", file=path, key=key,
                         allowed="a file name, e.g. <folder>/predictions.jsonl")
    exists = path.exists() and (not folder or any(path.iterdir()))
    if exists and not overwrite:
        raise MtdnnError(f"the output {'folder' if folder else 'file'} already exists",
                         file=path, key=key,
                         allowed="a new path, or --overwrite to replace it")


def check_output_folder(path: Path, key: str, allowed: str = "a folder path") -> None:
    """Fail early if the output folder ``path`` is a file or a file lies on its way."""
    if path.exists() and not path.is_dir():
        raise MtdnnError("the output folder is a file", file=path, key=key, allowed=allowed)
    check_output_parent(path)


def make_output_dir(path: Path, key: str = "output_dir") -> Path:
    """Create an output folder; a file in the way is a user error naming ``key``."""
    check_output_folder(path, key)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_error(path, error) from None
    return path


def raise_as_write_error(path: Path, error: Exception) -> None:
    """Re-raise ``error``, as a user error naming ``path`` when it is a failed write (a
    file in the way, a full disk) rather than a bug."""
    if not isinstance(error, MtdnnError) and (isinstance(error, OSError)
                                              or is_disk_full(error)):
        raise write_error(path, error) from None
    raise error


def umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def make_shareable(path: Path) -> None:
    """Give a written file or folder tree the modes a plain ``open``/``mkdir`` would have
    had under the user's umask: ``mkstemp``/``mkdtemp`` make 0600/0700, and safetensors
    writes its files 0600, which other users of a shared machine could not read."""
    mask = umask()
    for item in [path, *(path.rglob("*") if path.is_dir() else [])]:
        os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~mask)


def check_output_parent(path: Path) -> None:
    """Fail early, before any work, if ``path`` cannot be created: one of its folders
    is a file."""
    for parent in [path, *path.parents]:
        if parent.exists():
            if parent != path and not parent.is_dir():
                raise write_error(path, NotADirectoryError(errno.ENOTDIR, "Not a directory"))
            return


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds."""
    path = Path(path)
    if path.is_dir():
        raise MtdnnError("cannot write a file here: it is a folder", file=path,
                         allowed="a file name, e.g. <folder>/predictions.jsonl")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as error:
        raise write_error(path, error) from None
    try:
        yield Path(tmp)
        make_shareable(Path(tmp))
        os.replace(tmp, path)
    except Exception as error:
        raise_as_write_error(path, error)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a text file through a temporary name in the same folder, then rename."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write pretty JSON atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; on success it replaces ``path`` whole.

    The old folder is moved aside before the new one is renamed in, and removed only after,
    so at every instant either the old or the new complete folder exists.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise MtdnnError("cannot write a folder here: it is a file", file=path,
                         allowed="a folder path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    except OSError as error:
        raise write_error(path, error) from None
    old = path.parent / f".{path.name}.old-{os.getpid()}"
    try:
        yield tmp
        make_shareable(tmp)
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    except Exception as error:
        raise_as_write_error(path, error)
    finally:
        if not path.exists() and old.exists():  # interrupted between the two renames
            os.replace(old, path)
        shutil.rmtree(tmp, ignore_errors=True)
