"""Two runs of the calibration sweep side by side: how far their raw measurements differ (docs/model.md §3).

A no-refit prediction of run B with run A's M_X cannot be closer than the two runs' own
measurements allow. At the periodic (K, B, G) both runs measured, from the measurements alone
(no model):

- period difference |T_period,B / T_period,A − 1|: what even a perfect model of run A misses;
- floor offset: (T_period − G) of run B minus run A's over the launches recovered in both
  (median issue time within 10 % of that (K, B)'s smallest): a per-burst fixed cost,
  T_iss^0 + o, that one run has and the other lacks (a different bench or probe build) shows up as
  a constant here, and it is not transferable;
- drain-rate ratio R_A / R_B per (K, B) drain-limited in both (median issue ≥ 2 × the smallest):
  Eq. 1 gives T_period = V/R there, so run A's R(K, B) predicts each such launch of run B with a
  period error of |R_B / R_A − 1| (≈ |R_A / R_B − 1| for small differences), whatever the fit does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RECOVERED_TOLERANCE = 0.10  # recovered: median issue within 10 % of the (K, B)'s smallest
DRAIN_LIMITED_FACTOR = 2.0  # drain-limited: median issue ≥ 2 × the (K, B)'s smallest
KEYS = ["K", "B", "gap_ns"]


def _classified(points: pd.DataFrame) -> pd.DataFrame:
    """Periodic launches with their state: recovered, drain_limited (or neither) and V / T_period."""
    p = points[points["mode"] == "periodic"][KEYS + ["V", "tiss_med_ns", "period_med_ns"]].copy()
    floor = p.groupby(["K", "B"])["tiss_med_ns"].transform("min")
    p["recovered"] = p["tiss_med_ns"] <= floor * (1 + RECOVERED_TOLERANCE)
    p["drain_limited"] = p["tiss_med_ns"] >= DRAIN_LIMITED_FACTOR * floor
    p["rate_gbps"] = p["V"] / p["period_med_ns"]
    return p


def _stats(x: np.ndarray) -> dict | None:
    if not len(x):
        return None
    return {"median": float(np.median(x)), "mean": float(np.mean(x)), "min": float(np.min(x)), "max": float(np.max(x)),
            "points": int(len(x))}


def compare_runs(fit_points: pd.DataFrame, other_points: pd.DataFrame) -> dict:
    """The raw difference between two runs' periodic measurements of one store path (module docstring).

    Returns shared_points, period_difference_pct (median, mean, …, over the shared (K, B, G)),
    floor_offset_ns (other − fit, recovered in both), drain_rate_ratio (fit / other per launch
    drain-limited in both: its median, and |R_other / R_fit(K, B) − 1| in % as median and mean:
    the drain-limited launches' period error bound) and rate_ratio_by_configuration ("K,B" →
    fit_gbps, other_gbps, ratio, launches).
    """
    a, b = _classified(fit_points), _classified(other_points)
    m = a.merge(b, on=KEYS, suffixes=("_a", "_b"))
    period_diff = 100 * np.abs(m["period_med_ns_b"] / m["period_med_ns_a"] - 1).to_numpy()
    rec = m[m["recovered_a"] & m["recovered_b"]]
    offset = ((rec["period_med_ns_b"] - rec["gap_ns"]) - (rec["period_med_ns_a"] - rec["gap_ns"])).to_numpy()
    issue_offset = (rec["tiss_med_ns_b"] - rec["tiss_med_ns_a"]).to_numpy()
    dl = m[m["drain_limited_a"] & m["drain_limited_b"]]
    by_conf = {}
    for (k, bb), g in dl.groupby(["K", "B"]):  # per configuration drain-limited in both runs
        ra, rb = float(g["rate_gbps_a"].median()), float(g["rate_gbps_b"].median())
        by_conf[f"{int(k)},{int(bb)}"] = {"fit_gbps": ra, "other_gbps": rb, "ratio": ra / rb, "launches": int(len(g))}
    ratio = (dl["rate_gbps_a"] / dl["rate_gbps_b"]).to_numpy()
    # each drain-limited launch of the other run against the fitting run's median rate of its configuration
    # (what R(K, B) predicts with): period error V/R_A against V/R_B, relative to the measured V/R_B
    conf_a = dl.groupby(["K", "B"])["rate_gbps_a"].transform("median").to_numpy()
    bound = 100 * np.abs(dl["rate_gbps_b"].to_numpy() / conf_a - 1)
    return {
        "shared_points": int(len(m)),
        "period_difference_pct": _stats(period_diff),
        "floor_offset_ns": _stats(offset),
        "issue_floor_offset_ns": _stats(issue_offset),
        "drain_rate_ratio": None if not len(ratio) else {
            "median": float(np.median(ratio)), "launches": int(len(ratio)),
            "period_err_bound_median_pct": float(np.median(bound)), "period_err_bound_mean_pct": float(np.mean(bound))},
        "rate_ratio_by_configuration": by_conf,
    }
