"""Per-dump work of the streaming analyze on one core: both passes over the 8 real fused-kernel dumps.

Runs ``xstage_trace.pipeline.stream.analyze_streaming`` in this process (``workers=1``: no pool, so the figure
is one core's and does not depend on what else the machine runs, as long as one core is free) over
``sample_traces/h200_fused_moe/traced`` with its nsys report and ``calibration_host.json``: pass 1 over
the 4 control dumps, pass 2 over all 8, Table 3. The plan (dump headers, nsys export, alignment) is
made once beforehand and not timed. Prints best and median of ``--repeat`` runs, ms per dump and
records per core-second. ``--profile`` adds cProfile listings of the same work (by cumulative and by own time). ``--copies N`` analyses
N copies of every dump instead (SYNTHETIC input made by ``bench_analyze.replicate`` under /tmp and
removed after the run): several launches of each configuration, as a run of repeated trials has, which
``analyze`` reads in batches.

    python benchmarks/bench_dump_work.py [--repeat 7] [--profile] [--copies N]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACED = ROOT / "sample_traces" / "h200_fused_moe" / "traced"
CALIBRATION = ROOT / "sample_traces" / "h200_calibration" / "calibration_host.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--copies", type=int, default=0, help="analyse N synthetic copies of every dump instead")
    args = ap.parse_args()

    from xstage_trace.pipeline.analyses import AnalysisContext
    from xstage_trace.dataset.calibration import load_platform
    from xstage_trace.collectors.collect import plan_run
    from xstage_trace.pipeline.stream import analyze_streaming

    scratch = Path(tempfile.mkdtemp(prefix="xstage-bench-dump-work-synthetic-" if args.copies else "xstage-bench-dump-work-"))
    dumps = TRACED
    if args.copies:
        from bench_analyze import replicate

        dumps = scratch / "dumps"
        replicate(sorted(TRACED.glob("*.xsp*")), args.copies, dumps)
    plan = plan_run([next(TRACED.glob("*.nsys-rep")), dumps], Path(tempfile.mkdtemp(dir=scratch)))
    ctx = AnalysisContext(model=load_platform(CALIBRATION))
    records = sum(t.records for t in plan.tasks)

    def once() -> None:
        folder = Path(tempfile.mkdtemp(dir=scratch))
        analyze_streaming(plan.tasks, folder, dict(plan.tables, probe_slices=plan.slice_summary), ctx, workers=1)
        shutil.rmtree(folder)

    try:
        once()  # warm-up: imports, first-call caches
        times, cpu = [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            once()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        best, median = min(times), sorted(times)[len(times) // 2]
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{len(plan.tasks)} dumps, {records} records: best {best * 1e3:.0f} ms, median {median * 1e3:.0f} ms of {args.repeat}; "
              f"{best / len(plan.tasks) * 1e3:.1f} ms per dump; {records / best / 1e6:.2f} M records per core-second (best); "
              f"CPU time best {min(cpu) * 1e3:.0f} ms, median {sorted(cpu)[len(cpu) // 2] * 1e3:.0f} ms: "
              f"{records / min(cpu) / 1e6:.2f} M records per CPU-second")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            once()
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
            pstats.Stats(prof).sort_stats("tottime").print_stats(40)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
