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


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_EXPORT_ENV = "XSTAGE_MAX_EXPORT_BYTES"
DEFAULT_MAX_EXPORT_BYTES = 64 << 30
FREE_MARGIN_BYTES = 256 << 20  # left free on the cache's disk after the export is written
BLOCK_BYTES = 1 << 24


def zstd_content_size(path: str | Path) -> int | None:
    """The decompressed size a zstd file's first frame declares (Frame_Content_Size, RFC 8878 §3.1.1.1),
    or None when the frame does not declare it (streamed writers) or the file is not a zstd frame."""
    with open(path, "rb") as fh:
        head = fh.read(18)
    if len(head) < 5 or head[:4] != ZSTD_MAGIC:
        return None
    fhd = head[4]
    fcs_flag, single, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    fcs_bytes = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if fcs_bytes == 0:
        return None
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    field = head[pos: pos + fcs_bytes]
    if len(field) < fcs_bytes:
        return None
    value = int.from_bytes(field, "little")
    return value + 256 if fcs_bytes == 2 else value


def max_export_bytes() -> int:
    """The largest decompressed export written to the cache: $XSTAGE_MAX_EXPORT_BYTES, else 64 GiB."""
    from xstage_trace.base.limits import positive_int_env

    return positive_int_env(MAX_EXPORT_ENV, DEFAULT_MAX_EXPORT_BYTES, "byte count", "a size in bytes")


def decompressed_export(path: Path) -> Path:
    """The decompressed SQLite file of a ``.sqlite.zst`` export (from the cache when present). The
    decompression streams in blocks with a cap decided before the first byte is written: the smaller of
    $XSTAGE_MAX_EXPORT_BYTES and the cache disk's free space (less a margin), checked against the size
    the zstd frame declares and again as the bytes come; over it, nothing is left in the cache."""
    import shutil

    import pyarrow as pa

    digest = sha256_of(path)
    cache = user_cache_dir()
    target = cache / f"{digest[:32]}.sqlite"
    if target.is_file() and not target.is_symlink():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    limit = max_export_bytes()
    free = shutil.disk_usage(cache).free - FREE_MARGIN_BYTES
    cap = min(limit, max(free, 0))
    why = (f"more than {MAX_EXPORT_ENV}={limit}" if cap == limit else f"more than the {max(free, 0) >> 20} MiB free in the cache {cache}")
    fix = f"free space in {cache} (or set XDG_CACHE_HOME to a larger disk), raise {MAX_EXPORT_ENV}, or pass the .sqlite itself"
    declared = zstd_content_size(path)
    if declared is not None and declared > cap:
        raise InputError(path, f"decompresses to {declared} bytes, {why}", fix)
    fd, tmp = tempfile.mkstemp(prefix=".export.", suffix=".tmp", dir=cache)
    try:
        written = 0
        with os.fdopen(fd, "wb") as out, pa.input_stream(str(path), compression="zstd") as src:
            while block := src.read(BLOCK_BYTES):
                written += len(block)
                if written > cap:
                    raise InputError(path, f"decompresses to {why}", fix)
                out.write(block)
        os.replace(tmp, target)
    except InputError:
        Path(tmp).unlink(missing_ok=True)
        raise
    except (OSError, pa.ArrowException) as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(path, f"cannot decompress the zstd export ({exc})", "copy the whole file again, or decompress it with zstd -d and pass the .sqlite") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
