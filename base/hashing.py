"""Content hashes of input files (manifest provenance, duplicate detection, cache keys)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def sha256_of(path: str | Path, chunk_bytes: int = 1 << 22, follow_symlinks: bool = True) -> str:
    """Hex sha256 of a file, read in chunks. ``follow_symlinks=False``: the file is opened with
    O_NOFOLLOW (and O_NONBLOCK, so a FIFO cannot block) and must be a regular file; a symlink or
    anything else raises OSError."""
    flags = os.O_RDONLY if follow_symlinks else os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
    h = hashlib.sha256()
    with os.fdopen(os.open(path, flags), "rb") as fh:
        if not follow_symlinks and not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(f"{path}: not a regular file")
        while block := fh.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()
