"""Probe-dump decode throughput over the committed real sweep dumps (MB of dump per second)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from xstage_trace.base.probe_layout import RECORD_DTYPE
from xstage_trace.collectors.probe_format import decode_probe_dump, read_header
from xstage_trace.instrument.probe_writer import write_probe_dump

ROOT = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_calibration"


def main() -> None:
    files = sorted((ROOT / "sweep_host").glob("*.xsp")) + sorted((ROOT / "sweep_local").glob("*.xsp"))
    total = sum(f.stat().st_size for f in files)
    for f in files[:5]:
        decode_probe_dump(f)  # warm caches and imports
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        records = sum(decode_probe_dump(f).records.num_rows for f in files)
        best = min(best, time.perf_counter() - t)
    print(f"decode: {len(files)} dumps, {total / 1e6:.1f} MB, {records} records in {best:.3f} s "
          f"= {total / 1e6 / best:.0f} MB/s, {records / best / 1e6:.1f} M records/s")
    # One large dump: every record of the sweep as slices of one file (what a long fused-kernel
    # trace looks like), rewritten with the format's own writer.
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.xsp"
        _merge(files, big)
        times = sorted(_time(lambda: decode_probe_dump(big)) for _ in range(15))
        best, med = times[0], times[len(times) // 2]
        mb = big.stat().st_size / 1e6
        print(f"decode one {mb:.1f} MB dump: best {best * 1e3:.0f} ms = {mb / best:.0f} MB/s, median {med * 1e3:.0f} ms = {mb / med:.0f} MB/s")


def _merge(files: list[Path], out: Path) -> None:
    metas, recs, cap = [], [], 136
    for f in files:
        raw = np.fromfile(f, dtype=np.uint8)
        h, names, sl = read_header(f, raw)
        stored = np.minimum(sl["count"], int(h["capacity"]))
        r = raw[int(h["header_bytes"]):].view(RECORD_DTYPE)
        strided = np.zeros(len(sl) * cap, RECORD_DTYPE)
        strided[np.repeat(np.arange(len(sl)), stored) * cap + np.concatenate([np.arange(k) for k in stored])] = r
        metas.append(sl.copy())
        recs.append(strided)
    write_probe_dump(out, slice_meta=np.concatenate(metas), records=np.concatenate(recs), capacity=cap, event_names=names,
                     gpu_name="NVIDIA H200", sm_count=132, sm_clock_khz=1980000)


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
