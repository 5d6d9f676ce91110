"""Write files and directories so that readers never see half of them (temporary path, then rename).

A folder is published with ``renameat2(RENAME_NOREPLACE)`` (it never lands on something that
appeared meanwhile) and replaced with ``renameat2(RENAME_EXCHANGE)`` (old and new swap in one step;
what was swapped out is checked again before it is deleted). Where the kernel, libc or filesystem
lacks renameat2, a checked rename is the fallback. Temporary names carry the writer's pid
(``.NAME.PID.XXXXXXXX.tmp``), so the next writer removes what a killed one left behind. Output is
created with the user's umask (mkdtemp/mkstemp alone would make it private).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def current_umask() -> int:
    """The process umask (read from /proc where possible: setting it to read it races with threads)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _renameat2_fn():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not glibc ≥ 2.28 / musl ≥ 1.2.2
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2_fn()


def renameat2(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``: True when done, False when unsupported here (caller falls back);
    OSError for a real failure (EEXIST under RENAME_NOREPLACE, ENOENT under RENAME_EXCHANGE, …)."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), str(dst))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_temporaries(final: Path) -> list[Path]:
    """Delete ``.NAME.PID.*.tmp`` entries beside ``final`` left by a writer that no longer runs (killed
    by SIGKILL, power loss). Only this user's entries, never through a symlink; returns what was removed."""
    final = Path(final)
    pattern = re.compile(rf"^\.{re.escape(final.name)}\.(\d+)\.[A-Za-z0-9_]+\.tmp$")
    removed = []
    try:
        entries = list(os.scandir(final.parent))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.match(entry.name)
        if not m or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != os.geteuid():
            continue
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
        removed.append(Path(entry.path))
    return removed


def _temp_prefix(final: Path) -> str:
    return f".{final.name}.{os.getpid()}."


def _publish(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final`` unless something exists there (FileExistsError then)."""
    if renameat2(tmp, final, RENAME_NOREPLACE):
        return
    if os.path.lexists(final):
        raise FileExistsError(errno.EEXIST, "exists", str(final))
    os.rename(tmp, final)


def _exchange(tmp: Path, final: Path, replaceable: Callable[[Path], bool]) -> Path:
    """Put ``tmp`` at ``final`` in one step; returns where the old ``final`` now is (to delete)."""
    if renameat2(tmp, final, RENAME_EXCHANGE):
        if not replaceable(tmp):  # final changed between the caller's check and the swap: undo
            renameat2(tmp, final, RENAME_EXCHANGE)
            raise FileExistsError(errno.EEXIST, "changed while being replaced", str(final))
        return tmp
    if not replaceable(final):
        raise FileExistsError(errno.EEXIST, "not replaceable", str(final))
    old = Path(tempfile.mkdtemp(prefix=_temp_prefix(final), suffix=".tmp", dir=final.parent))
    os.rename(final, old)  # onto the empty placeholder: a directory may replace an empty one
    try:
        os.rename(tmp, final)
    except BaseException:
        os.rename(old, final)
        raise
    return old


@contextlib.contextmanager
def atomic_dir(final: Path, replaceable: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield a temporary directory beside ``final``; on success it becomes ``final`` in one rename.

    An existing ``final`` is never replaced (FileExistsError) unless ``replaceable(final)`` says so;
    then old and new are exchanged atomically and the old one is deleted.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(final), suffix=".tmp", dir=final.parent))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())
        yield tmp
        if replaceable is not None and os.path.lexists(final):
            old = _exchange(tmp, final, replaceable)
        else:
            _publish(tmp, final)
            old = None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(final: Path, mode: str = "w") -> Iterator:
    """Open a temporary file beside ``final``; on success rename it over ``final`` (user's umask)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(final), suffix=".tmp", dir=final.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(final: Path, text: str) -> None:
    """Write ``text`` to ``final`` through a temporary file."""
    with atomic_file(final) as fh:
        fh.write(text)
