"""Decoded Nsight exports kept in the user cache.

Reading an export out of SQLite is most of ``analyze``'s time on a small capture (the fused sample's 642 k
GPU-metric samples: ~0.45 s of SQLite row stepping, which no column selection shortens), and a report is
analysed again and again (other options, another calibration, a newer xstage-trace). So what
``nsys_reader`` reads from one export (its kernels, nvtx and gpu_metrics tables, GPUs, versions, warnings)
is kept under ``$XDG_CACHE_HOME/xstage-trace/decoded/<key>/`` as Arrow IPC files and a JSON document and read
back (~20 ms) while the key is the same. The key hashes the export file's content and name (warnings name
it) together with the source of the modules that decide what is read (the reader, the Nsight name
table, the table readers, the run schema) and the pyarrow version, so a changed export or a changed
reader never reads an old entry. A cache entry that cannot be read is ignored; one that cannot be
written (no space, no permission) is skipped: the cache changes how fast, never what.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.ipc as ipc

from xstage_trace.base.atomic import atomic_dir
from xstage_trace.base.hashing import sha256_of
from xstage_trace.base.paths import user_cache_dir

TABLES = ("kernels", "nvtx", "gpu_metrics")
FIELDS = ("gpus", "nsys_version", "schema_version", "utc_epoch_ns", "warnings")
READER_MODULES = ("collectors/nsys_reader.py", "collectors/nsys_names.py", "collectors/nsys_tables.py", "collectors/export_cache.py",
                  "base/schema.py")


def reader_fingerprint() -> str:
    """sha256 over the source of READER_MODULES and the pyarrow version: what decides the decoded tables."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(pa.__version__.encode())
    for name in READER_MODULES:
        h.update(name.encode() + b"\0" + (root / name).read_bytes())
    return h.hexdigest()


def cache_key(path: Path) -> str:
    """The entry of export file ``path``: its content, its name and the reader (``reader_fingerprint``)."""
    h = hashlib.sha256(f"{sha256_of(path)}\0{path.name}\0{reader_fingerprint()}".encode())
    return h.hexdigest()[:40]


def _entry(path: Path) -> Path:
    return user_cache_dir() / "decoded" / cache_key(path)


def _load(entry: Path) -> dict | None:
    try:
        doc = json.loads((entry / "export.json").read_text())
        tables = {name: ipc.open_file(pa.memory_map(str(entry / f"{name}.arrow"))).read_all() for name in TABLES}
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None
    if not all(k in doc for k in FIELDS):
        return None
    return {**tables, **{k: doc[k] for k in FIELDS}}


def _store(entry: Path, fields: dict) -> None:
    try:
        with atomic_dir(entry, replaceable=lambda _: True) as tmp:  # a damaged entry is replaced
            for name in TABLES:
                table = fields[name]
                with ipc.new_file(str(Path(tmp) / f"{name}.arrow"), table.schema,
                                  options=ipc.IpcWriteOptions(compression="lz4")) as out:
                    out.write_table(table)
            (Path(tmp) / "export.json").write_text(json.dumps({k: fields[k] for k in FIELDS}))
    except (OSError, TypeError, pa.ArrowException):
        pass


def cached_fields(path: Path, read: Callable[[Path], dict]) -> dict:
    """What ``read(path)`` returns for export file ``path`` (TABLES as Arrow tables and FIELDS as JSON values),
    from the cache when it holds this export read by this reader, else read and stored. A folder (a
    parquetdir export) is read, not cached."""
    path = Path(path)
    if not path.is_file():
        return read(path)
    entry = _entry(path)
    hit = _load(entry) if entry.is_dir() else None
    if hit is not None:
        return hit
    fields = read(path)
    _store(entry, fields)
    return fields
