"""Calibration fit time on the real sweeps: M_X with the Q grid (113 capacities × every periodic
launch's 64 bursts through the stalled recurrence) and 200 bootstrap resamples per K."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench_recurrence import best_of  # run as a script from benchmarks/: its folder is on sys.path
from xstage_trace.analysis.calibration_fit import fit_calibration, validate

ROOT = Path(__file__).resolve().parents[1] / "sample_traces"


def main() -> None:
    ours = pd.read_csv(ROOT / "h200_calibration" / "calibration_points.csv")
    ref = pd.read_csv(ROOT / "h200_burst_gap_reference" / "h200_burst_gap_sweep.csv")
    fit = fit_calibration(ours, store_path="host")
    for name, fn in [
        ("fit, our host sweep (120 periodic + 28 isolated launches)", lambda: fit_calibration(ours, store_path="host")),
        ("fit, reference host sweep (150 periodic launches)", lambda: fit_calibration(ref, store_path="host")),
        ("validate: our fit predicting the reference sweep", lambda: validate(fit, ref)),
    ]:
        print(f"{name}: {best_of(fn, 5) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
