"""GPU-metric ingest from an nsys SQLite export (rows per second).

Input: the committed fused-kernel export (real, 10 kHz GPU metrics). A temporary copy has its
GPU_METRICS rows repeated (timestamps shifted) until it holds a few million rows, so that the
number measures the reader rather than start-up.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from xstage_trace.collectors.nsys_reader import read_nsys_export

ROOT = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_fused_moe" / "traced"


def main(target_rows: int = 4_000_000) -> None:
    src = next(ROOT.glob("fused_reference.nsys-rep.*.sqlite"))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.sqlite"
        shutil.copyfile(src, db)
        con = sqlite3.connect(db)
        n0 = con.execute("SELECT count(*) FROM GPU_METRICS").fetchone()[0]
        span = con.execute("SELECT max(timestamp) - min(timestamp) + 1 FROM GPU_METRICS").fetchone()[0]
        k = 1
        while n0 * (k + 1) <= target_rows:
            con.execute("INSERT INTO GPU_METRICS SELECT rawTimestamp + ?, timestamp + ?, typeId, metricId, value "
                        "FROM GPU_METRICS WHERE rowid <= ?", (span * k, span * k, n0))
            k += 1
        con.commit()
        rows = con.execute("SELECT count(*) FROM GPU_METRICS").fetchone()[0]
        con.close()
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            e = read_nsys_export(db)
            best = min(best, time.perf_counter() - t)
        assert e.gpu_metrics.num_rows == rows
        print(f"gpu_metrics ingest: {rows} rows (whole export read: kernels, NVTX, metrics) in {best:.2f} s "
              f"= {rows / best / 1e6:.2f} M rows/s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000)
