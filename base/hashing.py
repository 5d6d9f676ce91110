"""Content hashes of input files (manifest provenance, duplicate detection, cache keys)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_of(path: str | Path, chunk_bytes: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()
