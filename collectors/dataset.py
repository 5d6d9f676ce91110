"""The run dataset on disk: one folder, one Parquet file per table (hive-partitioned by rank when a
table holds several ranks), zstd-compressed, plus manifest.json. Written to a temporary folder and
renamed, so a reader never sees half a run. DuckDB reads it as is:
``SELECT * FROM read_parquet('RUN/kernels*.parquet')`` or ``'RUN/kernels/*/*.parquet'`` with
``hive_partitioning = true``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from xstage_trace.base.atomic import atomic_dir
from xstage_trace.base.errors import InputError
from xstage_trace.base.schema import SCHEMA_VERSION, TABLES, conform, empty_table

MANIFEST = "manifest.json"


def write_run(run_dir: str | Path, tables: dict[str, pa.Table], manifest: dict, extra_files: dict[str, str] | None = None) -> Path:
    """Write every table of TABLES (empty ones too, so the schema is always there), the manifest and
    ``extra_files`` (name → text, e.g. calibration_points.csv), all inside the one atomic rename."""
    run_dir = Path(run_dir)
    with atomic_dir(run_dir) as tmp:
        for name in TABLES:
            table = conform(name, tables[name]) if name in tables else empty_table(name)
            ranks = pc.unique(table["rank"]).to_pylist() if table.num_rows else []
            if len(ranks) > 1:
                for r in sorted(ranks):
                    part = table.filter(pc.equal(table["rank"], r))
                    (tmp / name / f"rank={r}").mkdir(parents=True)
                    pq.write_table(part, tmp / name / f"rank={r}" / "part-0.parquet", compression="zstd")
            else:
                pq.write_table(table, tmp / f"{name}.parquet", compression="zstd")
        doc = dict(manifest, schema_version=SCHEMA_VERSION, tables={n: (tables[n].num_rows if n in tables else 0) for n in TABLES})
        (tmp / MANIFEST).write_text(json.dumps(doc, indent=2, sort_keys=True, default=str))
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return run_dir


def is_run_dir(path: Path) -> bool:
    """True for a folder written by write_run."""
    return Path(path, MANIFEST).is_file()


def read_table(run_dir: str | Path, name: str) -> pa.Table:
    """One table of a run folder (``NAME.parquet`` or its ``NAME/rank=R/`` partitions), conformed
    to its schema; empty with the schema when the folder has none."""
    run_dir = Path(run_dir)
    single = run_dir / f"{name}.parquet"
    parts = sorted((run_dir / name).glob("rank=*/*.parquet")) if (run_dir / name).is_dir() else []
    if single.is_file():
        return conform(name, pq.read_table(single))
    if parts:
        return pa.concat_tables([conform(name, pq.read_table(p, partitioning=None)) for p in parts])
    return empty_table(name)


def read_manifest(run_dir: str | Path) -> dict:
    """manifest.json of a run folder, refused when missing or newer than this xstage-trace."""
    run_dir = Path(run_dir)
    if not Path(run_dir, MANIFEST).is_file():
        raise InputError(run_dir, "not an xstage run dataset (no manifest.json)", "pass a folder written by xstage-trace analyze -o")
    manifest = json.loads(Path(run_dir, MANIFEST).read_text())
    if manifest.get("schema_version", 0) > SCHEMA_VERSION:
        raise InputError(run_dir, f"run dataset schema {manifest.get('schema_version')} is newer than this xstage-trace ({SCHEMA_VERSION})", "upgrade xstage-trace")
    return manifest


def read_run(run_dir: str | Path) -> tuple[dict[str, pa.Table], dict]:
    """Read a run folder back: (tables, manifest)."""
    manifest = read_manifest(run_dir)
    return {name: read_table(run_dir, name) for name in TABLES}, manifest
