"""Every table of the shipped samples, analysed by two source trees, compared value by value (issue 29: the
before/after table equality as a re-runnable check).

    python benchmarks/compare_tables.py --src /tmp/base/src src

For each sample (fused with its nsys report and calibration, DeepGEMM, FA3, FA4, the quick calibration dumps; the
three real kernels again with the path-drain calibration, which runs the forward prediction and the what-ifs)
runs ``xstage-trace analyze`` once per tree into a temporary folder, then compares every ``*.parquet`` table
(the parts of a table read together, rows in file order) and every ``*.csv`` of the two run folders: same files,
same columns, same dtypes, same values (NaN equal to NaN, floats compared bitwise). Prints one line per
sample and exits 1 on the first difference found in any of them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
S = "sample_traces"
SAMPLES = {
    "fused": [f"{S}/h200_fused_moe/traced/fused_reference.nsys-rep", f"{S}/h200_fused_moe/traced",
              "--calibration", f"{S}/h200_calibration/path_drain/calibration_host_tensor2d.json", "--warmup-launches", "2"],
    "deepgemm": [f"{S}/h200_deepgemm/dumps", "--calibration", f"{S}/h200_calibration/calibration_host_bulk.json"],
    "fa3": [f"{S}/h200_fa3/dumps"],
    "fa4": [f"{S}/h200_fa4/dumps"],
    "quick": [f"{S}/h200_calibration/quick"],
    # the path-drain calibration: the §11 forward prediction and the §13 what-ifs of the real kernels
    "deepgemm-link": [f"{S}/h200_deepgemm/dumps", "--calibration", f"{S}/h200_calibration/path_drain/calibration_host_tensor2d.json"],
    "fa3-link": [f"{S}/h200_fa3/dumps", "--calibration", f"{S}/h200_calibration/path_drain/calibration_host_tensor2d.json"],
    "fa4-link": [f"{S}/h200_fa4/dumps", "--calibration", f"{S}/h200_calibration/path_drain/calibration_host_tensor2d.json"],
}


def analyze(src: Path, args: list[str], out: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    subprocess.run([sys.executable, "-m", "xstage_trace", "analyze", *args, "-o", str(out)], cwd=ROOT, env=env,
                   check=True, stdout=subprocess.DEVNULL)


def tables(run: Path) -> dict[str, pd.DataFrame]:
    """Each table of a run folder: a Parquet table's parts (``NAME/rank=R/part-*.parquet`` or ``NAME.parquet``)
    concatenated in path order, each CSV as read."""
    out: dict[str, list] = {}
    for f in sorted(run.rglob("*.parquet")):
        rel = f.relative_to(run)
        out.setdefault(rel.parts[0] if len(rel.parts) > 1 else rel.stem, []).append(
            pq.read_table(f, partitioning=None).to_pandas().assign(_part=str(rel)))
    frames = {k: pd.concat(v, ignore_index=True) for k, v in out.items()}
    frames.update({str(f.relative_to(run)): pd.read_csv(f) for f in sorted(run.rglob("*.csv"))})
    return frames


def same(a: pd.DataFrame, b: pd.DataFrame) -> str | None:
    """None when ``a`` and ``b`` hold the same columns, dtypes and values; else the first difference."""
    if list(a.columns) != list(b.columns):
        return f"columns {list(a.columns)} != {list(b.columns)}"
    if len(a) != len(b):
        return f"{len(a)} != {len(b)} rows"
    for c in a.columns:
        x, y = a[c], b[c]
        if str(x.dtype) != str(y.dtype):
            return f"{c}: dtype {x.dtype} != {y.dtype}"
        if x.dtype.kind == "f":
            xa, ya = x.to_numpy(), y.to_numpy()
            bad = ~((xa.view(np.int64) == ya.view(np.int64)) | (np.isnan(xa) & np.isnan(ya)))
        else:
            xs, ys = x.astype(object), y.astype(object)
            bad = ~((xs == ys) | (xs.isna() & ys.isna())).to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return f"{c}: {bad.sum()} rows differ, first row {i}: {x.iloc[i]!r} != {y.iloc[i]!r}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", nargs=2, required=True, metavar=("A", "B"), help="the two source trees (their src/ folders)")
    ap.add_argument("--samples", nargs="*", default=list(SAMPLES), choices=list(SAMPLES))
    args = ap.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="compare-tables-") as tmp:
        for name in args.samples:
            runs = [Path(tmp) / f"{name}-{i}.run" for i in (0, 1)]
            for src, run in zip(args.src, runs):
                analyze(Path(src), SAMPLES[name], run)
            ta, tb = tables(runs[0]), tables(runs[1])
            diffs = [f"{t}: only in {'A' if t in ta else 'B'}" for t in sorted(set(ta) ^ set(tb))]
            diffs += [f"{t}: {d}" for t in sorted(set(ta) & set(tb)) if (d := same(ta[t], tb[t]))]
            rows = sum(len(f) for f in ta.values())
            print(f"{name}: {len(ta)} tables, {rows} rows: " + ("identical" if not diffs else "DIFFER\n  " + "\n  ".join(diffs)))
            failed |= bool(diffs)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
