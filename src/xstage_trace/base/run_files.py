"""The run folder's file format: one Parquet file per table (hive-partitioned by rank when a table holds
several ranks), zstd-compressed, plus manifest.json with every file's sha256. DuckDB reads it as is:
``SELECT * FROM read_parquet('RUN/kernels*.parquet')`` or ``'RUN/kernels/*/*.parquet'`` with
``hive_partitioning = true``. The ``probe_slices``, ``probes``, ``tiles`` and ``bursts`` tables of an analyzed run
are one file per batch of consecutive dumps, ``NAME/rank=R/part-NNNNN.parquet`` (written while the
dumps stream through ``analyze``).

Reading a run checks every file against its manifest, so a file changed, swapped or removed afterwards
is an error naming it. The base layer (collectors read earlier runs as inputs and write table parts);
the run's transaction (``staged_run``) is ``dataset/run_folder.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from xstage_trace.base.errors import InputError, printable
from xstage_trace.base.hashing import sha256_of
from xstage_trace.base.jsonable import loads
from xstage_trace.base.schema import SCHEMA_VERSION, TABLES, conform, empty_table

MANIFEST = "manifest.json"
CALIBRATION_COPY = "calibration.json"  # the copy of the calibration JSON a run was analysed with
TOOL = "xstage-trace"
MAX_MANIFEST_BYTES = 64 << 20
_REWRITE = "re-run xstage-trace analyze on the original inputs to write the run again"


DELTA_COLUMNS = ("clock", "t_gt_ns", "tile")  # integers that mostly grow from row to row: clock readings, tile ids
PACKED_COLUMNS = ("clock", "t_gt_ns")  # delta-encoded clock readings stored without zstd, which saved 15 % of their bytes at half their write time
SPLIT_COLUMNS = ("t_ns",)  # float times: their bytes split into streams compress better and faster
STATISTICS = {"probes": ["rank", "dump", "t_ns"]}  # min/max only where readers prune (a dump's rows, a time window): 20 % of a probe part's write


def write_parquet(table: pa.Table, path: Path, statistics: bool | list[str] = True) -> None:
    """One Parquet file, zstd-compressed, dictionary-encoding only the text and dictionary columns
    (trying it on numeric columns costs half the write time of a probe table and saves nothing), the
    clock and tile columns delta-encoded and the float times byte-stream-split (a fused-kernel probe
    part: 38 % less write time, 4x faster to read, 2 % larger; benchmarks/README.md), the delta-encoded clock
    readings left uncompressed (then 16 % less write time, 36 % less read time, 8.5 % larger); min/max statistics on
    ``statistics`` (True: every column)."""
    text = [f.name for f in table.schema if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    types = {f.name: f.type for f in table.schema}
    encoding = {c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS if c in types and pa.types.is_integer(types[c])}
    encoding.update({c: "BYTE_STREAM_SPLIT" for c in SPLIT_COLUMNS if c in types and pa.types.is_floating(types[c])})
    compression = {f.name: "none" if f.name in PACKED_COLUMNS and f.name in encoding else "zstd" for f in table.schema}
    pq.write_table(table, path, compression=compression, use_dictionary=text, column_encoding=encoding or None, write_statistics=statistics)


def write_table(folder: Path, name: str, table: pa.Table) -> None:
    """One run-dataset table into ``folder``: NAME.parquet, or NAME/rank=R/part-0.parquet per rank when it holds several."""
    table = conform(name, table)
    ranks = pc.unique(table["rank"]).to_pylist() if table.num_rows else []
    if len(ranks) > 1:
        for r in sorted(ranks):
            part = table.filter(pc.equal(table["rank"], r))
            (folder / name / f"rank={r}").mkdir(parents=True)
            write_parquet(part, folder / name / f"rank={r}" / "part-0.parquet", STATISTICS.get(name, True))
    else:
        write_parquet(table, folder / f"{name}.parquet", STATISTICS.get(name, True))


def table_part_path(folder: Path, name: str, rank: int, index: int) -> Path:
    """Where a streaming analyze writes one dump's part of a table: NAME/rank=R/part-NNNNN.parquet."""
    return Path(folder) / name / f"rank={rank}" / f"part-{index:05d}.parquet"


def write_table_part(folder: Path, name: str, rank: int, index: int, table: pa.Table) -> None:
    """Write one dump's rows of table ``name`` (probes, tiles, bursts) as their own Parquet file."""
    path = table_part_path(folder, name, rank, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet(conform(name, table), path, STATISTICS.get(name, True))



def unlisted_files(run_dir: Path) -> list[str]:
    """Files in a run folder that its manifest does not account for (a user's notes, a report saved
    into it): ``files`` lists what write_run wrote; runs from before that list know their table names."""
    manifest = read_manifest(run_dir)
    listed = set(manifest.get("files") or {})
    found = sorted(p.relative_to(run_dir).as_posix() for p in Path(run_dir).rglob("*") if not p.is_dir())
    if listed:
        return [f for f in found if f not in listed and f != MANIFEST]
    known = {MANIFEST, "calibration_points.csv"} | {f"{n}.parquet" for n in TABLES}
    return [f for f in found if f not in known and not (f.split("/")[0] in TABLES and f.endswith(".parquet"))]


def read_manifest(run_dir: str | Path) -> dict:
    """manifest.json of a run folder, checked: strict JSON, an object, written by xstage-trace, a schema
    this version reads. InputError naming the file otherwise."""
    path = Path(run_dir, MANIFEST)
    if not path.is_file():
        raise InputError(run_dir, f"not an xstage run dataset (no {MANIFEST})", "pass a folder written by xstage-trace analyze -o")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise InputError(path, f"is larger than {MAX_MANIFEST_BYTES >> 20} MiB, not a run manifest", _REWRITE)
    try:
        doc = loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(path, f"not a readable manifest ({exc.__class__.__name__}: {str(exc)[:120]})", _REWRITE) from None
    if not isinstance(doc, dict) or doc.get("tool") != TOOL:
        raise InputError(path, "not an xstage-trace manifest (no \"tool\": \"xstage-trace\")", "pass a folder written by xstage-trace analyze -o")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(path, f"schema_version {version!r} is not an integer", _REWRITE)
    if version > SCHEMA_VERSION:
        raise InputError(run_dir, f"run dataset schema {version} is newer than this xstage-trace ({SCHEMA_VERSION})", "upgrade xstage-trace")
    tables = doc.get("tables", {})
    if not isinstance(tables, dict) or not all(_is_count(v) for v in tables.values()):
        raise InputError(path, "\"tables\" is not an object of row counts", _REWRITE)
    for field, (test, what) in _FIELDS.items():
        if field in doc and not test(doc[field]):
            raise InputError(path, f"\"{field}\" is not {what} ({printable(repr(doc[field]))[:60]})", _REWRITE)
    return doc


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _text_or_none(v) -> bool:
    return v is None or isinstance(v, str)


def _list_of(kind):
    return lambda v: isinstance(v, list) and all(isinstance(x, kind) for x in v)


_FIELDS = {  # the manifest fields readers use, with the type they need (garbage there is an error naming the field)
    "gpus": (_list_of(str), "a list of GPU names"),
    "inputs": (_list_of(dict), "a list of input objects"),
    "warnings": (_list_of(str), "a list of warning texts"),
    "nsys_versions": (lambda v: isinstance(v, list), "a list"),
    "alignment": (lambda v: isinstance(v, dict) and all(isinstance(a, dict) for a in v.values()), "an object of alignments per rank"),
    "calibration": (_text_or_none, "a path or null"),
    "calibration_file": (lambda v: v in (None, CALIBRATION_COPY), f"null or {CALIBRATION_COPY!r}"),
    "time_base": (_text_or_none, "a text or null"),
    "tool_version": (_text_or_none, "a version text"),
    "warmup_launches": (_is_count, "a count"),
    "calibration_points": (_is_count, "a count"),
    "files": (lambda v: isinstance(v, dict) and all(isinstance(d, str) for d in v.values()), "an object of sha256 sums"),
}


def is_run_dir(path: str | Path) -> bool:
    """True for a folder written by write_run (its manifest.json names xstage-trace as the tool)."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return False
    try:
        read_manifest(path)
    except InputError:
        return False
    return True


def _read_table_file(name: str, path: Path, partitioned: bool) -> pa.Table:
    try:
        table = pq.read_table(path, partitioning=None) if partitioned else pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(path, f"not a readable Parquet table ({exc.__class__.__name__}: {str(exc)[:120]})", _REWRITE) from None
    try:
        return conform(name, table)
    except (pa.ArrowException, KeyError) as exc:
        raise InputError(path, f"columns do not match the {name} schema ({exc.__class__.__name__})", _REWRITE) from None


def _listed(run_dir: Path, manifest: dict) -> dict[str, str]:
    """The manifest's ``files`` (relative path → sha256), checked to be an object of strings inside the folder."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise InputError(run_dir / MANIFEST, "\"files\" is not an object of sha256 sums", _REWRITE)
    for rel, digest in files.items():
        if not isinstance(digest, str) or ".." in Path(rel).parts or Path(rel).is_absolute() or not rel:
            raise InputError(run_dir / MANIFEST, f"lists a file outside the run folder or without a sha256 ({printable(str(rel))[:80]!r})", _REWRITE)
    return files


def _check_one(run_dir: Path, rel: str, digest: str) -> Path:
    path = run_dir / rel
    if path.is_symlink() or not path.is_file():
        what = "is not a regular file" if os.path.lexists(path) else "is missing from the run folder"
        raise InputError(path, f"{what} (manifest.json lists it)", _REWRITE)
    if sha256_of(path) != digest:
        raise InputError(path, "does not match the sha256 that manifest.json recorded (changed after the run was written)", _REWRITE)
    return path


def check_listed_file(run_dir: str | Path, manifest: dict, rel: str) -> Path | None:
    """The path of one file the manifest lists, checked against its sha256; None when it lists no such file."""
    run_dir = Path(run_dir)
    files = _listed(run_dir, manifest)
    return _check_one(run_dir, rel, files[rel]) if rel in files else None


def _check_files(run_dir: Path, manifest: dict, tables: list[str] | None = None) -> None:
    """A run folder is exactly its manifest: a file there that ``files`` does not list is an error (it
    would never be read, and it must not be mistaken for the hashed one); every listed file (only those
    of ``tables`` when given) is there with those bytes."""
    files = _listed(run_dir, manifest)
    foreign = unlisted_files(run_dir)  # anywhere in the folder, whichever tables are read
    if foreign:
        raise InputError(run_dir / foreign[0], "is in the run folder but manifest.json does not list it; a run folder holds only what analyze wrote",
                         "move it out of the run folder, or re-run xstage-trace analyze on the original inputs")
    if tables is not None:
        files = {rel: d for rel, d in files.items() if rel.split("/")[0].removesuffix(".parquet") in tables}
    for rel, digest in files.items():
        _check_one(run_dir, rel, digest)


def check_run_files(run_dir: str | Path, manifest: dict) -> None:
    """InputError unless the folder holds exactly the files its manifest lists (present, regular, not
    symlinks; no others). Hashes are checked when a file is read (a 10 GB run opens without reading it)."""
    run_dir = Path(run_dir)
    files = _listed(run_dir, manifest)
    foreign = unlisted_files(run_dir)
    if foreign:
        raise InputError(run_dir / foreign[0], "is in the run folder but manifest.json does not list it; a run folder holds only what analyze wrote",
                         "move it out of the run folder, or re-run xstage-trace analyze on the original inputs")
    for rel in files:
        path = run_dir / rel
        if path.is_symlink() or not path.is_file():
            what = "is not a regular file" if os.path.lexists(path) else "is missing from the run folder"
            raise InputError(path, f"{what} (manifest.json lists it)", _REWRITE)


def table_files(run_dir: Path, name: str, manifest: dict | None = None) -> list[str]:
    """The Parquet files of one table of a run folder (NAME.parquet, or NAME/rank=*/*.parquet): those
    the manifest lists when given, else what is on disk."""
    if manifest is not None:
        files = _listed(Path(run_dir), manifest)
        return [str(Path(run_dir) / rel) for rel in sorted(files)
                if rel == f"{name}.parquet" or (rel.startswith(f"{name}/rank=") and rel.endswith(".parquet") and rel.count("/") == 2)]
    single = Path(run_dir) / f"{name}.parquet"
    if single.is_file():
        return [str(single)]
    folder = Path(run_dir) / name
    return [str(p) for p in sorted(folder.glob("rank=*/*.parquet"))] if folder.is_dir() else []


def read_run(run_dir: str | Path, tables: list[str] | None = None) -> tuple[dict[str, pa.Table], dict]:
    """Read a run folder back: (tables, manifest); ``tables`` limits which are read. Every file is checked
    against the sha256 manifest.json recorded and each table's row count against the manifest, so a
    missing, truncated or swapped table file is an InputError, not an empty table."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    if manifest["schema_version"] < SCHEMA_VERSION:
        raise InputError(run_dir, f"run dataset schema {manifest['schema_version']} is older than this xstage-trace ({SCHEMA_VERSION})",
                         "analyze its inputs again (manifest.json lists them)")
    _check_files(run_dir, manifest, tables)
    out = {}
    for name in tables or TABLES:
        parts = list(iter_table_files(run_dir, manifest, name, checked=True))
        out[name] = pa.concat_tables(parts) if parts else empty_table(name)
    return out, manifest


def iter_table_files(run_dir: str | Path, manifest: dict, name: str, checked: bool = False) -> Iterator[pa.Table]:
    """One table of a run folder file by file (its files checked against ``manifest`` first unless ``checked``,
    their rows against its row count after the last), so a table larger than memory is read a part at a time."""
    run_dir = Path(run_dir)
    if not checked:
        _check_files(run_dir, manifest, [name])
    files = table_files(run_dir, name, manifest)
    rows = 0
    for f in files:
        table = _read_table_file(name, Path(f), True)
        rows += table.num_rows
        yield table
    want = manifest.get("tables", {}).get(name)
    if want is not None and rows != want:
        raise InputError(Path(files[0]) if len(files) == 1 else run_dir,
                         f"{name} is missing (manifest.json lists {want} rows)" if not files else f"holds {rows} rows of {name}, manifest.json lists {want} (file replaced or truncated?)",
                         _REWRITE)


def read_table(run_dir: str | Path, name: str) -> pa.Table:
    """One table of a run folder, with the same checks as read_run (its files only)."""
    return read_run(run_dir, [name])[0][name]
