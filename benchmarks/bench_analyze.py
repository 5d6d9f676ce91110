"""End-to-end ``xstage-trace analyze`` throughput and peak memory at 1 M, 10 M (and 100 M) probe records.

Input (SYNTHETIC, made by this script in /tmp and never committed): the 8 real fused-kernel dumps of
``sample_traces/h200_fused_moe/traced`` copied N times under new names (one padding byte of the label differs per copy), analyzed together with
the real nsys report of that capture (so alignment, kernels and GPU metrics are the real ones; every
copy of a dump aligns onto the kernel its original ran in). Each process runs under
``/usr/bin/time -v`` for wall time and CPU use; memory is sampled every 0.1 s with psutil over the
whole process tree (analyze and its worker processes): the peak of the summed RSS (an upper bound:
pages the workers share are counted in each) and the largest single process's peak RSS.

    python benchmarks/bench_analyze.py [--records 1e6 1e7 1e8] [--keep]
    python benchmarks/bench_analyze.py --records 1e8 --src /tmp/base/src src --repeat 3   # alternately, on the same copies

``--src`` names source trees (each a ``src`` folder, e.g. ``git archive OLD src | tar x -C /tmp/base``): each run
imports xstage_trace from one of them (``PYTHONPATH``), alternating between them ``--repeat`` times over the same
copies, so two commits are compared under the same load. Without it, the installed xstage_trace is run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil  # a dependency of dask distributed

ROOT = Path(__file__).resolve().parents[1]
TRACED = ROOT / "sample_traces" / "h200_fused_moe" / "traced"
CALIBRATION = ROOT / "sample_traces" / "h200_calibration" / "calibration_host.json"
NOTE = "SYNTHETIC benchmark input: real dumps from sample_traces/h200_fused_moe/traced, copied {n} times (one padding byte of the label differs per copy). Not a capture.\n"


def dump_records(path: Path) -> int:
    """Stored records of one dump (header fields only)."""
    from xstage_trace.collectors.probe_format import decode_probe_dump

    return decode_probe_dump(path).records.num_rows


def replicate(dumps: list[Path], copies: int, folder: Path) -> None:
    """``copies`` plain copies of every dump in ``folder``, marked synthetic. Each copy differs from the
    others in one byte of the label field's padding after its NUL (ignored by the decoder), so that
    analyze's duplicate detection (by content hash) reads every copy instead of dropping it."""
    from xstage_trace.base.probe_layout import HEADER_DTYPE
    from xstage_trace.collectors.probe_format import read_dump_bytes

    folder.mkdir(parents=True)
    (folder / "SYNTHETIC.txt").write_text(NOTE.format(n=copies))
    pad = HEADER_DTYPE.fields["label"][1] + HEADER_DTYPE.fields["label"][0].itemsize - 4  # last 4 label bytes
    for d in dumps:
        raw = bytearray(read_dump_bytes(d).tobytes())
        assert raw[pad - 1] == 0, "the label must leave its last bytes free"
        for i in range(copies):
            raw[pad:pad + 4] = i.to_bytes(4, "little")
            (folder / f"{d.name.split('.')[0]}_copy{i:04d}.xsp").write_bytes(raw)


def _tree_rss_bytes(proc: psutil.Process) -> int:
    """Summed RSS of ``proc`` and every process below it (0 for any that ended meanwhile)."""
    total = 0
    for q in [proc, *proc.children(recursive=True)]:
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


@contextlib.contextmanager
def scratch(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A new folder in the temporary directory (name starting ``prefix``) for a benchmark's synthetic inputs
    and runs: removed afterwards, or kept and its path printed when ``keep``."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def time_v(argv: list[str], env: dict | None = None) -> dict:
    """Run ``argv`` under /usr/bin/time -v: wall s, user s, sys s, CPU %, peak RSS of its largest
    process and peak summed RSS of its process tree (bytes), stdout."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(["/usr/bin/time", "-v", *argv], stdout=out, stderr=err, text=True, env=env)
        proc, tree = psutil.Process(p.pid), 0
        while p.poll() is None:
            tree = max(tree, _tree_rss_bytes(proc))
            time.sleep(0.1)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {p.returncode}:\n{stderr[-2000:]}")
    field = lambda name: re.search(rf"{re.escape(name)}: (.+)", stderr).group(1).strip()  # noqa: E731
    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")
    return {
        "wall_s": sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall))),
        "user_s": float(field("User time (seconds)")),
        "sys_s": float(field("System time (seconds)")),
        "cpu_pct": float(field("Percent of CPU this job got").rstrip("%")),
        "peak_rss_bytes": int(field("Maximum resident set size (kbytes)")) * 1024,
        "tree_rss_bytes": tree,
        "stdout": stdout,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=float, nargs="+", default=[1e6, 1e7])
    ap.add_argument("--keep", action="store_true", help="keep the synthetic inputs and run folders in /tmp")
    ap.add_argument("--src", nargs="+", default=[None], help="source trees (src folders) to run alternately")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each source tree per size")
    args = ap.parse_args()
    dumps = sorted(TRACED.glob("*.xsp*"))
    report = next(p for p in TRACED.glob("*.nsys-rep"))
    per_copy = sum(dump_records(d) for d in dumps)
    exe = [sys.executable, "-m", "xstage_trace"]
    print(f"one copy: {len(dumps)} dumps, {per_copy} records; report {report.name}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| src | records | dumps | dump GB | run folder GB | wall s | M records/s | CPU % (200 = both cores) | M records per CPU-s | CPU-ns per record | peak RSS, largest process GB | peak RSS, all processes GB | load avg (1 min) after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for target in args.records:
        copies = max(1, math.ceil(target / per_copy))
        with scratch(f"xstage-bench-analyze-synthetic-{int(target):d}-", args.keep) as work:
            replicate(dumps, copies, work / "dumps")
            os.sync()  # a user's dumps are on disk already: not dirty pages the kernel writes back during the run
            records = copies * per_copy
            gb = sum(p.stat().st_size for p in (work / "dumps").iterdir()) / 1e9
            for _ in range(args.repeat):
                for src in args.src:
                    shutil.rmtree(work / "run", ignore_errors=True)
                    env = dict(os.environ, **({"PYTHONPATH": str(Path(src).resolve())} if src else {}))
                    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an install keeps its bytecode: time the analysis, not the compiler
                    t = time_v([*exe, "analyze", str(report), str(work / "dumps"), "--calibration", str(CALIBRATION), "-o", str(work / "run"), "--json"], env)
                    summary = json.loads(t["stdout"])
                    assert summary["probes"] == records, (summary["probes"], records)
                    run_gb = sum(p.stat().st_size for p in (work / "run").rglob("*") if p.is_file()) / 1e9
                    print(f"| {src or 'installed'} | {records / 1e6:.2f} M | {copies * len(dumps)} | {gb:.2f} | {run_gb:.2f} | {t['wall_s']:.1f} | {records / t['wall_s'] / 1e6:.3f} | "
                          f"{t['cpu_pct']:.0f} | {records / (t['user_s'] + t['sys_s']) / 1e6:.3f} | {(t['user_s'] + t['sys_s']) / records * 1e9:.0f} | {t['peak_rss_bytes'] / 1e9:.2f} | {t['tree_rss_bytes'] / 1e9:.2f} | {os.getloadavg()[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
