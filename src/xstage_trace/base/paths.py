"""Checks on a user's input path before it is opened: it exists, and it is a regular file or a
folder (a FIFO would block the reader forever, a device such as /dev/zero never ends)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from xstage_trace.base.errors import InputError

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def display_name(name: str) -> str:
    """A file name as text that every encoder accepts: bytes that are not UTF-8 (which Python keeps
    as lone surrogates) become ``\\xNN`` escapes, so Arrow, Parquet and JSON can store the name."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def input_kind(path: str | Path) -> str:
    """'file' or 'dir' for an existing path (symlinks followed); InputError for anything else."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, "no such file or folder", "check the path") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})", "check the path and its permissions") from None
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    what = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    raise InputError(path, f"is {what}, not a regular file", "save the data to a file first and pass that file")


def require_file(path: str | Path) -> Path:
    """``path`` when it is a regular file (symlinks followed); InputError otherwise (never blocks)."""
    path = Path(path)
    if input_kind(path) != "file":
        raise InputError(path, "is a folder, not a file", "pass a file")
    return path


def user_cache_dir() -> Path:
    """xstage-trace's folder in the user's cache: ``$XDG_CACHE_HOME/xstage-trace``
    (``~/.cache/xstage-trace`` when XDG_CACHE_HOME is unset or not absolute)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "xstage-trace"


def shown_path(path: str | Path, base: str | Path | None = None) -> str:
    """How an output (a report, a PR comment) names a file or run folder: relative to ``base`` (the
    working folder by default) when it lies inside it, otherwise its name alone; never an absolute
    path, which would leak the user's home and machine layout into what they share."""
    p = Path(os.path.abspath(path))
    root = Path(os.path.abspath(base if base is not None else os.getcwd()))
    try:
        rel = p.relative_to(root)
    except ValueError:
        return display_name(p.name)
    return display_name(str(rel)) if str(rel) != "." else display_name(p.name)
