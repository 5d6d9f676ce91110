"""Content hashes of input files (manifest provenance, duplicate detection, cache keys)."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
HASH_THREADS = 4  # files hashed at once: hashlib and file reads release the GIL (1.6 GB: 1.2 s on one thread, ~0.8 s on 2 cores)


_DIGESTS: dict[tuple[int, int, int, int, int], str] = {}  # (device, inode, size, mtime_ns, ctime_ns) -> digest, this process
SETTLED_NS = 2_000_000_000  # a file changed this recently is hashed every time: a rewrite within the clock's tick keeps its times


def sha256_of(path: str | Path, chunk_bytes: int = 1 << 22, follow_symlinks: bool = True) -> str:
    """Hex sha256 of a file, read in chunks. ``follow_symlinks=False``: the file is opened with
    O_NOFOLLOW (and O_NONBLOCK, so a FIFO cannot block) and must be a regular file; a symlink or
    anything else raises OSError. A regular file already hashed by this process and unchanged since
    (same device, inode, size, modification and status-change times) is not read again: one analyze
    hashes an export for its sidecar check and again for the decoded-export cache key. Only a file
    whose times are ``SETTLED_NS`` old is remembered (as git treats "racily clean" entries): file
    times advance in ticks, so a file rewritten just after it was hashed can keep them."""
    flags = os.O_RDONLY if follow_symlinks else os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
    with os.fdopen(os.open(path, flags), "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            if not follow_symlinks:
                raise OSError(f"{path}: not a regular file")
            return _read_digest(fh, chunk_bytes)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key in _DIGESTS:
            return _DIGESTS[key]
        digest = _read_digest(fh, chunk_bytes)
        if max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - SETTLED_NS:
            _DIGESTS[key] = digest
        return digest


def _read_digest(fh, chunk_bytes: int) -> str:
    h = hashlib.sha256()
    while block := fh.read(chunk_bytes):
        h.update(block)
    return h.hexdigest()


def hash_all(func: Callable[..., T], items: Iterable, threads: int = HASH_THREADS) -> list[T]:
    """``func(item)`` for every item on ``threads`` threads, in order: for hashing many files at once
    (``sha256_of``); the first exception is raised here."""
    items = list(items)
    with ThreadPoolExecutor(max(1, min(threads, len(items)))) as pool:
        return list(pool.map(func, items))
