"""End-to-end ``xstage-trace analyze`` throughput and peak RSS at 1 M and 10 M probe records.

Input (SYNTHETIC, made by this script in /tmp and never committed): the 8 real fused-kernel dumps of
``sample_traces/h200_fused_moe/traced`` copied N times under new names (one padding byte of the label differs per copy), analyzed together with
the real nsys report of that capture (so alignment, kernels and GPU metrics are the real ones; every
copy of a dump aligns onto the kernel its original ran in). Each process runs under
``/usr/bin/time -v`` for wall time, CPU use and peak RSS.

    python benchmarks/bench_analyze.py [--records 1e6 1e7] [--keep]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACED = ROOT / "sample_traces" / "h200_fused_moe" / "traced"
CALIBRATION = ROOT / "sample_traces" / "h200_calibration" / "calibration_host.json"
NOTE = "SYNTHETIC benchmark input: real dumps from sample_traces/h200_fused_moe/traced, hard-linked {n} times. Not a capture.\n"


def dump_records(path: Path) -> int:
    """Stored records of one dump (header fields only)."""
    from xstage_trace.collectors.probe_format import decode_probe_dump

    return decode_probe_dump(path).records.num_rows


def replicate(dumps: list[Path], copies: int, folder: Path) -> None:
    """``copies`` plain copies of every dump in ``folder``, marked synthetic. Each copy differs from the
    others in one byte of the label field's padding after its NUL (ignored by the decoder), so that
    analyze's duplicate detection (by content hash) reads every copy instead of dropping it."""
    from xstage_trace.collectors.probe_format import HEADER_DTYPE, read_dump_bytes

    folder.mkdir(parents=True)
    (folder / "SYNTHETIC.txt").write_text(NOTE.format(n=copies))
    pad = HEADER_DTYPE.fields["label"][1] + HEADER_DTYPE.fields["label"][0].itemsize - 4  # last 4 label bytes
    for d in dumps:
        raw = bytearray(read_dump_bytes(d).tobytes())
        assert raw[pad - 1] == 0, "the label must leave its last bytes free"
        for i in range(copies):
            raw[pad:pad + 4] = i.to_bytes(4, "little")
            (folder / f"{d.name.split('.')[0]}_copy{i:04d}.xsp").write_bytes(raw)


def time_v(argv: list[str]) -> dict:
    """Run ``argv`` under /usr/bin/time -v: wall s, user s, sys s, CPU %, peak RSS bytes, stdout."""
    r = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    field = lambda name: re.search(rf"{re.escape(name)}: (.+)", r.stderr).group(1).strip()  # noqa: E731
    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")
    return {
        "wall_s": sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall))),
        "user_s": float(field("User time (seconds)")),
        "sys_s": float(field("System time (seconds)")),
        "cpu_pct": float(field("Percent of CPU this job got").rstrip("%")),
        "peak_rss_bytes": int(field("Maximum resident set size (kbytes)")) * 1024,
        "stdout": r.stdout,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=float, nargs="+", default=[1e6, 1e7])
    ap.add_argument("--keep", action="store_true", help="keep the synthetic inputs and run folders in /tmp")
    args = ap.parse_args()
    dumps = sorted(TRACED.glob("*.xsp*"))
    report = next(p for p in TRACED.glob("*.nsys-rep"))
    per_copy = sum(dump_records(d) for d in dumps)
    exe = str(Path(sys.executable).parent / "xstage-trace")
    print(f"one copy: {len(dumps)} dumps, {per_copy} records; report {report.name}")
    print("| records | dumps | input MB | wall s | M records/s | CPU % (200 = both cores) | peak RSS GB | RSS bytes/record |")
    print("|---|---|---|---|---|---|---|---|")
    for target in args.records:
        copies = max(1, math.ceil(target / per_copy))
        work = Path(tempfile.mkdtemp(prefix=f"xstage-bench-analyze-synthetic-{int(target):d}-"))
        try:
            replicate(dumps, copies, work / "dumps")
            records = copies * per_copy
            mb = copies * sum(d.stat().st_size for d in dumps) / 1e6
            t = time_v([exe, "analyze", str(report), str(work / "dumps"), "--calibration", str(CALIBRATION), "-o", str(work / "run"), "--json"])
            summary = json.loads(t["stdout"])
            assert summary["probes"] == records, (summary["probes"], records)
            print(f"| {records / 1e6:.2f} M | {copies * len(dumps)} | {mb:.0f} | {t['wall_s']:.1f} | {records / t['wall_s'] / 1e6:.3f} | "
                  f"{t['cpu_pct']:.0f} | {t['peak_rss_bytes'] / 1e9:.2f} | {t['peak_rss_bytes'] / records:.0f} |", flush=True)
        finally:
            if args.keep:
                print(f"kept {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
