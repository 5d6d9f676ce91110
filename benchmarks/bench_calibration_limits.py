"""`calibrate fit` at the largest input it accepts (pipeline/runner.py: DEFAULT_MAX_FIT_POINTS points of
the fitted store path and instruction, DEFAULT_MAX_FIT_POINTS × FILE_ROWS_PER_FIT_POINT rows in the file)
and on a file over the limit: wall time and peak memory (max RSS) of the real CLI, one process each.

The tables repeat the reference host sweep (h200_burst_gap_sweep.csv, its 150 host launches): repeated
points are the costliest input measured (a 2048-point file of distinct points fits in less memory); the
filler rows of the largest file are local-path points, read and checked but not fitted."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "sample_traces" / "h200_burst_gap_reference" / "h200_burst_gap_sweep.csv"


def points(dest: str, n: int) -> pd.DataFrame:
    """``n`` rows of the sweep's ``dest`` launches, repeated."""
    src = pd.read_csv(SWEEP)
    src = src[src["dest"] == dest]
    reps = -(-n // len(src))
    return pd.concat([src] * reps, ignore_index=True).iloc[:n]


def run(args: list[str]) -> tuple[int, float, float]:
    """(exit code, wall s, peak RSS MiB) of one CLI process (its own rusage, from wait4)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "xstage_trace", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    rc = os.waitstatus_to_exitcode(status)
    if rc not in (0, 2):
        sys.exit(p.stderr.read().decode())
    return rc, wall, usage.ru_maxrss / 1024


def main() -> None:
    from xstage_trace.pipeline.runner import DEFAULT_MAX_FIT_POINTS, FILE_ROWS_PER_FIT_POINT

    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            f"fit at the limit: {DEFAULT_MAX_FIT_POINTS} host points": points("host", DEFAULT_MAX_FIT_POINTS),
            f"largest file: {DEFAULT_MAX_FIT_POINTS * FILE_ROWS_PER_FIT_POINT} rows, {DEFAULT_MAX_FIT_POINTS} of them host":
                pd.concat([points("host", DEFAULT_MAX_FIT_POINTS),
                           points("local", DEFAULT_MAX_FIT_POINTS * (FILE_ROWS_PER_FIT_POINT - 1))], ignore_index=True),
            f"over the limit (refused before the fit): {DEFAULT_MAX_FIT_POINTS + 1} host points": points("host", DEFAULT_MAX_FIT_POINTS + 1),
            "over the limit (refused before the fit): 1,000,000 host points": points("host", 1_000_000),
            f"file over the limit (refused before parsing): {DEFAULT_MAX_FIT_POINTS * FILE_ROWS_PER_FIT_POINT + 1} rows":
                points("local", DEFAULT_MAX_FIT_POINTS * FILE_ROWS_PER_FIT_POINT + 1),
        }
        for i, (name, frame) in enumerate(cases.items()):
            path = Path(tmp) / f"points{i}.csv"
            frame.to_csv(path, index=False)
            rc, wall, peak = run(["calibrate", "fit", str(path), "--dest", "host", "--json"])
            print(f"{name} ({path.stat().st_size / 2**20:.0f} MiB): exit {rc}, {wall:.1f} s, peak RSS {peak:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
