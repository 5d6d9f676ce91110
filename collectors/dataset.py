"""The run dataset on disk: one folder, one Parquet file per table (hive-partitioned by rank when a
table holds several ranks), zstd-compressed, plus manifest.json. Written to a temporary folder and
renamed, so a reader never sees half a run. DuckDB reads it as is:
``SELECT * FROM read_parquet('RUN/kernels*.parquet')`` or ``'RUN/kernels/*/*.parquet'`` with
``hive_partitioning = true``. The ``probes`` table of an analyzed run is one file per dump,
``probes/rank=R/part-NNNNN.parquet`` (written while the dumps stream through ``analyze``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from xstage_trace.base.atomic import atomic_dir
from xstage_trace.base.errors import InputError
from xstage_trace.base.schema import SCHEMA_VERSION, TABLES, conform, empty_table

MANIFEST = "manifest.json"


def write_table(folder: Path, name: str, table: pa.Table) -> None:
    """One run-dataset table into ``folder``: NAME.parquet, or NAME/rank=R/part-0.parquet per rank when it holds several."""
    table = conform(name, table)
    ranks = pc.unique(table["rank"]).to_pylist() if table.num_rows else []
    if len(ranks) > 1:
        for r in sorted(ranks):
            part = table.filter(pc.equal(table["rank"], r))
            (folder / name / f"rank={r}").mkdir(parents=True)
            pq.write_table(part, folder / name / f"rank={r}" / "part-0.parquet", compression="zstd")
    else:
        pq.write_table(table, folder / f"{name}.parquet", compression="zstd")


def probe_part_path(folder: Path, rank: int, index: int) -> Path:
    """Where a streaming analyze writes one dump's probe records: probes/rank=R/part-NNNNN.parquet."""
    return Path(folder) / "probes" / f"rank={rank}" / f"part-{index:05d}.parquet"


def write_probe_part(folder: Path, rank: int, index: int, records: pa.Table) -> None:
    """Write one dump's records as its own Parquet file of the ``probes`` table."""
    path = probe_part_path(folder, rank, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(conform("probes", records), path, compression="zstd")


def write_run(run_dir: str | Path, tables: dict[str, pa.Table], manifest: dict | Callable[[], dict],
              extra_files: dict[str, str] | Callable[[], dict[str, str]] | None = None,
              results: dict | Callable[[], dict] | None = None, fill: Callable[[Path], dict[str, int]] | None = None) -> dict[str, int]:
    """Write every table of TABLES (empty ones too, so the schema is always there), the manifest,
    ``extra_files`` (name → text, e.g. calibration_points.csv) and ``results`` (name → DataFrame, written
    as NAME.parquet, e.g. table3), all inside the one atomic rename; returns the row count per table.
    ``fill(tmp)``, when given, runs first inside the temporary folder (a streaming analyze writes its
    probe parts there) and returns the row counts of the tables it wrote, which are not written again;
    ``manifest``, ``extra_files`` and ``results`` may then be functions called after it."""
    run_dir = Path(run_dir)
    with atomic_dir(run_dir) as tmp:
        streamed = fill(tmp) if fill else {}
        for name in TABLES:
            if name not in streamed:
                write_table(tmp, name, tables[name] if tables.get(name) is not None else empty_table(name))
        counts = {n: (tables[n].num_rows if tables.get(n) is not None else 0) for n in TABLES}
        counts.update(streamed)
        for name, frame in ((results() if callable(results) else results) or {}).items():
            pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp / f"{name}.parquet", compression="zstd")
        for name, text in ((extra_files() if callable(extra_files) else extra_files) or {}).items():
            (tmp / name).write_text(text)
        doc = dict(manifest() if callable(manifest) else manifest, schema_version=SCHEMA_VERSION, tables=counts)
        (tmp / MANIFEST).write_text(json.dumps(doc, indent=2, sort_keys=True, default=str))
    return counts


def is_run_dir(path: Path) -> bool:
    """True for a folder written by write_run."""
    return Path(path, MANIFEST).is_file()


def table_files(run_dir: Path, name: str) -> list[str]:
    """The Parquet files of one table of a run folder (NAME.parquet, or NAME/rank=*/*.parquet)."""
    single = Path(run_dir) / f"{name}.parquet"
    if single.is_file():
        return [str(single)]
    folder = Path(run_dir) / name
    return [str(p) for p in sorted(folder.glob("rank=*/*.parquet"))] if folder.is_dir() else []


def read_run(run_dir: str | Path, tables: list[str] | None = None) -> tuple[dict[str, pa.Table], dict]:
    """Read a run folder back: (tables, manifest); ``tables`` limits which are read."""
    run_dir = Path(run_dir)
    if not Path(run_dir, MANIFEST).is_file():
        raise InputError(run_dir, "not an xstage run dataset (no manifest.json)", "pass a folder written by xstage-trace analyze -o")
    manifest = json.loads(Path(run_dir, MANIFEST).read_text())
    if manifest.get("schema_version", 0) > SCHEMA_VERSION:
        raise InputError(run_dir, f"run dataset schema {manifest.get('schema_version')} is newer than this xstage-trace ({SCHEMA_VERSION})", "upgrade xstage-trace")
    if manifest.get("schema_version", 0) < SCHEMA_VERSION:
        raise InputError(run_dir, f"run dataset schema {manifest.get('schema_version')} is older than this xstage-trace ({SCHEMA_VERSION})",
                         "analyze its inputs again (manifest.json lists them)")
    out = {}
    for name in tables or TABLES:
        files = table_files(run_dir, name)
        out[name] = pa.concat_tables([conform(name, pq.read_table(f, partitioning=None)) for f in files]) if files else empty_table(name)
    return out, manifest
