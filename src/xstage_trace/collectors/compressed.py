"""zstd-compressed Nsight exports (``*.sqlite.zst``): decompressed once into the user cache.

SQLite cannot read a compressed file, so the export is decompressed to
``$XDG_CACHE_HOME/xstage-trace/<sha256 of the .zst>.sqlite`` (temporary name, then rename) and reused
while the compressed file is unchanged: the cache key is the compressed file's content hash.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from xstage_trace.base.errors import InputError
from xstage_trace.base.hashing import sha256_of
from xstage_trace.base.paths import user_cache_dir

ZST_SUFFIX = ".zst"


def decompressed_export(path: Path) -> Path:
    """The decompressed SQLite file of a ``.sqlite.zst`` export (from the cache when present)."""
    import pyarrow as pa

    digest = sha256_of(path)
    cache = user_cache_dir()
    target = cache / f"{digest[:32]}.sqlite"
    if target.is_file() and not target.is_symlink():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".export.", suffix=".tmp", dir=cache)
    try:
        with os.fdopen(fd, "wb") as out, pa.input_stream(str(path), compression="zstd") as src:
            while block := src.read(1 << 24):
                out.write(block)
        os.replace(tmp, target)
    except (OSError, pa.ArrowException) as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(path, f"cannot decompress the zstd export ({exc})", "copy the whole file again, or decompress it with zstd -d and pass the .sqlite") from None
    return target
