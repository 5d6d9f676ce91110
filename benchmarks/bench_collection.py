"""``xstage-trace collection`` over hundreds of runs: seconds per query, in-process and end to end.

Input (SYNTHETIC, made by this script in /tmp and never committed): one real run folder analyzed
from ``sample_traces/h200_fused_moe/traced`` (8 configurations of the fused kernel, 59 k tiles) and
one from the calibration quick sweep (22 calibration points), hard-linked into 300 + 30 run folders,
each calibration run with a copy of ``calibration_host.json`` beside it (the ``calibrate run -o``
layout). Measured twice: as analyze writes runs today (Table 3 computed per run through
``open_run(d).table3()``) and with ``table3.parquet`` in every run (the layout issue 9 adds; written
here from ``open_run(d).table3()``).

    python benchmarks/bench_collection.py [--runs 300] [--calibration-runs 30] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench_analyze import scratch, time_v  # run as a script from benchmarks/: its folder is on sys.path

ROOT = Path(__file__).resolve().parents[1]
TRACED = ROOT / "sample_traces" / "h200_fused_moe" / "traced"
CALIB = ROOT / "sample_traces" / "h200_calibration"
EXE = str(Path(sys.executable).parent / "xstage-trace")
NOTE = "SYNTHETIC benchmark input: {n} hard-linked copies of run folders analyzed from sample_traces/. Not captures.\n"


def analyze(out: Path, *inputs) -> Path:
    subprocess.run([EXE, "analyze", *map(str, inputs), "-o", str(out), "--json"], check=True, stdout=subprocess.DEVNULL)
    return out


def link_tree(src: Path, dst: Path) -> None:
    """``dst`` as a copy of ``src`` whose files are hard links."""
    shutil.copytree(src, dst, copy_function=os.link)


def build(work: Path, runs: int, calibration_runs: int) -> tuple[Path, Path]:
    """(fused source run, collection root) under ``work``."""
    fused = analyze(work / "src" / "fused.run", next(TRACED.glob("*.nsys-rep")), TRACED, "--calibration", CALIB / "calibration_host.json")
    quick = analyze(work / "src" / "quick.run", next((CALIB / "quick").glob("*.nsys-rep")), CALIB / "quick")
    root = work / "collection"
    root.mkdir()
    (root / "SYNTHETIC.txt").write_text(NOTE.format(n=runs + calibration_runs))
    for i in range(runs):
        link_tree(fused, root / "ci" / f"pr{i // 10:03d}" / f"run{i:04d}")
    for i in range(calibration_runs):
        folder = root / "calibration" / f"cal{i:03d}"
        link_tree(quick, folder / "run")
        os.link(CALIB / "calibration_host.json", folder / "calibration_host.json")
    return fused, root


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def in_process(root: Path) -> dict[str, float]:
    """Seconds of each step in one process (a fresh collection; the table3 view is built on first use)."""
    from xstage_trace.dataset.collection import open_collection

    out = {}
    t = time.perf_counter()
    c = open_collection([root])
    out["open (walk, manifests, views)"] = time.perf_counter() - t
    out["runs()"] = timed(c.runs)
    out["table3() first call"] = timed(c.table3)
    out["table3() again"] = timed(c.table3)
    out["worst(20)"] = timed(lambda: c.worst(20))
    out["calibration_drift() + point_drift()"] = timed(lambda: (c.calibration_drift(), c.point_drift()))
    out["sql: backpressured tiles per run"] = timed(lambda: c.sql("SELECT run, count(*) FROM tiles WHERE backpressured GROUP BY run"))
    return out


def cli(root: Path, query: str) -> tuple[float, float]:
    """(wall s, peak RSS GB) of ``xstage-trace collection ROOT --query QUERY --json``."""
    t = time_v([EXE, "collection", str(root), "--query", query, "--json"])
    return t["wall_s"], t["peak_rss_bytes"] / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--calibration-runs", type=int, default=30)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    with scratch("xstage-bench-collection-synthetic-", args.keep) as work:
        fused, root = build(work, args.runs, args.calibration_runs)
        tiles = json.loads((fused / "manifest.json").read_text())["tables"]["tiles"]
        print(f"{args.runs} fused-kernel runs ({tiles} tiles each, {args.runs * tiles / 1e6:.1f} M tiles) + {args.calibration_runs} calibration runs")
        for layout in ("today (Table 3 computed per run)", "with table3.parquet per run"):
            if layout.startswith("with"):
                from xstage_trace import open_run

                t3 = open_run(fused).table3()
                for run in sorted((root / "ci").glob("*/run*")):
                    t3.to_parquet(run / "table3.parquet")
            print(f"\n{layout}")
            print("| step | s |\n|---|---|")
            for step, s in in_process(root).items():
                print(f"| {step} | {s:.2f} |")
            for q in ("table3", "worst", "calibration-drift"):
                wall, rss = cli(root, q)
                print(f"| CLI `collection ROOT --query {q} --json` | {wall:.2f} (peak RSS {rss:.2f} GB) |")


if __name__ == "__main__":
    main()
