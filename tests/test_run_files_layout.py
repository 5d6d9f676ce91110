"""base/run_files.write_parquet: what each column of a part is stored as (the file's own Parquet metadata), that the
rows read back unchanged, and that DuckDB reads the part (the run folder's SQL surface)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xstage_trace.base.run_files import write_parquet


def _probe_like(n: int = 5000) -> pa.Table:
    rng = np.random.default_rng(0)
    clock = np.cumsum(rng.integers(1, 2000, n)).astype(np.int64) + (1 << 40)
    return pa.table({"rank": pa.array(np.zeros(n, np.int32)), "dump": pa.array(["d.xsp"] * n).dictionary_encode(),
                     "tile": pa.array(np.arange(n, dtype=np.uint32) // 5), "clock": pa.array(clock),
                     "t_gt_ns": pa.array(clock * 2 + 17), "t_ns": pa.array(clock * 0.5 + 0.25), "payload": pa.array(rng.integers(0, 9, n).astype(np.uint32))})


def test_clock_readings_are_delta_packed_without_zstd_and_the_rest_compressed(tmp_path):
    table = _probe_like()
    write_parquet(table, tmp_path / "p.parquet", ["rank", "dump", "t_ns"])
    group = pq.ParquetFile(tmp_path / "p.parquet").metadata.row_group(0)
    stored = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    for name in ("clock", "t_gt_ns"):
        assert stored[name].compression == "UNCOMPRESSED" and "DELTA_BINARY_PACKED" in stored[name].encodings
    assert stored["tile"].compression == "ZSTD" and "DELTA_BINARY_PACKED" in stored["tile"].encodings
    assert stored["t_ns"].compression == "ZSTD" and "BYTE_STREAM_SPLIT" in stored["t_ns"].encodings
    assert all(stored[c].compression == "ZSTD" for c in ("rank", "dump", "payload"))
    assert stored["rank"].statistics is not None and stored["clock"].statistics is None  # min/max only where asked
    assert pq.read_table(tmp_path / "p.parquet").equals(table)


def test_duckdb_reads_a_part_as_written(tmp_path):
    import duckdb

    table = _probe_like()
    write_parquet(table, tmp_path / "p.parquet", ["rank", "dump", "t_ns"])
    got = duckdb.connect().sql(f"SELECT sum(clock), sum(t_gt_ns) - sum(clock), count(DISTINCT tile), max(t_ns) FROM read_parquet('{tmp_path / 'p.parquet'}')").fetchall()[0]
    clock = table["clock"].to_numpy().astype(object)  # Python integers: the sums exceed int64
    assert got == (sum(clock), sum(clock) + 17 * len(clock), 1000, float(table["t_ns"].to_numpy().max()))
