"""The one output policy of every writing command (docs/cli.md "Where output goes").

A command's output path is checked before any input is read (``check_output``): it is never an
input, never inside an input folder or a run folder the command reads, never a symlink, and an
existing file or folder there is replaced only when it is recognisably this tool's own earlier output
of the same kind, and only with ``--force``. Writing goes through ``output_file`` / ``output_dir``:
a temporary name beside the target, renamed over it on success (base/atomic.py), removed on any
error. OS errors on the way (a full disk, a read-only folder, a name over the file-name limit)
become one InputError line naming the path; nothing is left behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

from xstage_trace.base.atomic import atomic_dir, atomic_file
from xstage_trace.base.errors import InputError

TEMP_NAME_EXTRA = 32  # ".NAME.PID.XXXXXXXX.tmp" adds this many bytes at most to NAME (base/atomic.py)
SNIFF_BYTES = 4096

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}


def os_error_line(path: str | Path, exc: OSError) -> InputError:
    """The one-line InputError for an OSError met while writing ``path`` (nothing was written)."""
    code = exc.errno
    if code is None:  # Arrow's IO errors carry the OS message, not the errno
        text = str(exc)
        code = next((c for c in (*_DISK_FULL, *_READ_ONLY, errno.ENAMETOOLONG) if os.strerror(c) in text), None)
    if code in _DISK_FULL:
        return InputError(path, "the disk is full (no space left while writing); nothing was written", "free some space, or write elsewhere with -o")
    if code in _READ_ONLY:
        return InputError(path, f"cannot be written ({exc.strerror or 'permission denied'}); nothing was written", "name a folder you can write with -o")
    if code == errno.ENAMETOOLONG:
        return InputError(path, "the name is longer than this file system allows; nothing was written", "name a shorter file with -o")
    if code == errno.EEXIST:
        return InputError(path, "appeared or changed while the output was written; nothing was replaced", "run again, or name another path with -o")
    if code in (errno.ENOTDIR, errno.EISDIR):
        return InputError(path, f"is in the way of the output ({exc.strerror}); nothing was written", "name another path with -o")
    return InputError(path, f"cannot be written ({exc.strerror or exc}); nothing was written", "check the path, its folder and free space")


@contextlib.contextmanager
def translated_os_errors(path: str | Path) -> Iterator[None]:
    """OSError inside the block → the one-line InputError of ``os_error_line``."""
    try:
        yield
    except InputError:
        raise
    except OSError as exc:
        raise os_error_line(path, exc) from None


def name_max(folder: Path) -> int:
    """The longest file name (bytes) the file system of ``folder`` (or its first existing parent) takes."""
    for p in (folder, *folder.parents):
        with contextlib.suppress(OSError):
            return int(os.pathconf(p, "PC_NAME_MAX"))
    return 255


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def _run_folder_above(path: Path) -> Path | None:
    """The xstage-trace run folder that ``path`` would lie inside, if any."""
    from xstage_trace.base.run_files import MANIFEST, is_run_dir

    for p in path.parents:
        if (p / MANIFEST).is_file() and is_run_dir(p):
            return p
    return None


def check_output(path: str | Path, *, inputs: Iterable[str | Path] = (), force: bool = False, kind: str = "file",
                 ours: Callable[[Path], bool] | None = None, option: str = "-o", example: str = "out.md") -> Path:
    """``path`` when a command may write its output there (see the module text); InputError otherwise.

    ``kind`` is "file" or "dir"; ``ours(path)`` tells this tool's own earlier output of that kind (the
    only thing ``force`` replaces); ``inputs`` are the files and folders the command reads."""
    path = Path(path)
    fix_new = f"name a new {'folder' if kind == 'dir' else 'file'}, e.g. {option} {example}"
    if path.name in ("", ".", ".."):
        raise InputError(path, f"is not a {'folder' if kind == 'dir' else 'file'} name", fix_new)
    target = Path(os.path.realpath(path))
    for raw in inputs:
        if raw is None:
            continue
        src = Path(os.path.realpath(raw))
        if target == src:
            raise InputError(path, f"is also an input; {option} never writes onto what the command reads", fix_new)
        if Path(raw).is_dir() and _is_within(target, src):
            raise InputError(path, f"lies inside the input folder {src}; {option} never writes into an input", f"write it outside that folder, e.g. {option} {example}")
        if _is_within(src, target):
            raise InputError(path, f"holds the input {src}; replacing it would delete that input", fix_new)
    run = _run_folder_above(target)
    if run is not None:
        raise InputError(path, f"lies inside the run folder {run}; a run folder holds only what analyze wrote", f"write it outside the run folder, e.g. {option} {example}")
    limit = name_max(target.parent) - TEMP_NAME_EXTRA
    if len(os.fsencode(path.name)) > limit:
        raise InputError(path, f"the name is {len(os.fsencode(path.name))} bytes; this file system takes {limit} for an output name", "name a shorter file with " + option)
    if os.path.lexists(path):
        if path.is_symlink():
            raise InputError(path, f"is a symbolic link; {option} never writes through one", fix_new)
        if kind == "dir" and not path.is_dir():
            raise InputError(path, f"exists and is not a folder; {option} never replaces a file", fix_new)
        if kind == "file" and not path.is_file():
            raise InputError(path, f"exists and is not a regular file; {option} never replaces it", fix_new)
        if ours is None or not ours(path):
            raise InputError(path, f"exists and was not written by xstage-trace; {option} never replaces it", fix_new)
        if not force:
            raise InputError(path, "already holds earlier xstage-trace output", f"pass --force to replace it, or {fix_new}")
    above = next((p for p in target.parents if os.path.lexists(p)), None)
    if above is not None and not above.is_dir():
        raise InputError(path, f"cannot be created: {above} is not a folder", fix_new)
    if above is not None and not os.access(above, os.W_OK | os.X_OK):
        raise InputError(path, f"cannot be created: {above} is not writable", f"name a folder you can write with {option}")
    return path


def starts_with(*marks: bytes) -> Callable[[Path], bool]:
    """``ours`` for a file whose first bytes are one of ``marks`` (e.g. b"# xstage-trace compare")."""

    def test(path: Path) -> bool:
        try:
            with open(path, "rb") as fh:
                head = fh.read(SNIFF_BYTES)
        except OSError:
            return False
        return any(head.startswith(m) for m in marks)

    return test


def contains(mark: bytes) -> Callable[[Path], bool]:
    """``ours`` for a file whose first or last SNIFF_BYTES hold ``mark`` (a producer field, a key)."""

    def test(path: Path) -> bool:
        try:
            with open(path, "rb") as fh:
                head = fh.read(SNIFF_BYTES)
                fh.seek(max(0, fh.seek(0, 2) - SNIFF_BYTES))
                return mark in head or mark in fh.read()
        except OSError:
            return False

    return test


@contextlib.contextmanager
def output_file(path: str | Path, mode: str = "w") -> Iterator:
    """Write ``path`` through a temporary file renamed over it on success (removed on any error);
    OS errors → one InputError line. Call ``check_output`` first."""
    path = Path(path)
    with translated_os_errors(path), atomic_file(path, mode) as fh:
        yield fh


def write_output(path: str | Path, data: str | bytes) -> Path:
    """``data`` (text or bytes) at ``path`` through ``output_file``."""
    with output_file(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)
    return Path(path)


@contextlib.contextmanager
def output_dir(path: str | Path, replace: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """A temporary folder beside ``path`` that becomes ``path`` in one rename on success (an existing
    one is exchanged only when ``replace(path)`` allows it); removed on any error, OS errors → one line."""
    path = Path(path)
    with translated_os_errors(path), atomic_dir(path, replaceable=replace) as tmp:
        yield tmp



def check_outputs(marks: dict, *, inputs: Iterable[str | Path] = (), force: bool = False) -> dict[Path, bytes | None]:
    """``check_output`` for each given path of ``marks`` (path or None → the bytes its earlier output
    starts with, an ``ours`` test, or None for a CSV: its earlier output has the header row about to be
    written, checked by ``write_outputs``). Returns {path: mark} of the paths to write; two options naming one file is an error."""
    paths = {Path(p): m for p, m in marks.items() if p is not None}
    real = [os.path.realpath(p) for p in paths]
    if len(set(real)) != len(real):
        raise InputError(next(iter(paths)), "is named by two output options", "give each output its own file")
    for p, mark in paths.items():
        ours = mark if callable(mark) else starts_with(mark) if mark is not None else (lambda q: q.is_file())
        check_output(p, inputs=inputs, force=force, ours=ours,
                     example=f"out{''.join(p.suffixes) or '.md'}")
    return paths


def write_outputs(targets: dict[Path, bytes | None], texts: dict) -> None:
    """Write ``texts[path]`` for every path of ``targets`` (from ``check_outputs``), after checking that
    each existing CSV among them (mark None) starts with the header row about to be written."""
    for path, mark in targets.items():
        if mark is None and os.path.lexists(path):
            header = texts[path].split("\n", 1)[0].encode()
            if not starts_with(header + b"\n")(path):
                raise InputError(path, "exists and is not an earlier xstage-trace table of this kind (its header differs); -o never replaces it",
                                 f"name a new file, e.g. {path.with_name('new_' + path.name)}")
    created = []
    try:
        for path in targets:
            new = not os.path.lexists(path)
            write_output(path, texts[path])
            if new:
                created.append(path)
    except BaseException:
        for path in created:  # all or none of the new files
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
