"""Fit the platform model M_X from calibration points and predict the whole sweep with no refit (spec §3).

Input: one row per launch with dest, mode (periodic | isolated), K, B, V, gap_ns, tiss_med_ns,
tiss_p90_ns, period_med_ns (the calibration benchmark's reduction or the reference CSV).

- T_iss^0(K, B): the large-gap plateau, i.e. the recovered launches of that (K, B) (isolated, or
  periodic with G ≥ 1.5·V/R) whose median issue time sits within 10 % of the smallest one; a
  (K, B) with none is interpolated from its neighbours (PlatformModel.floor_ns).
- o: per-burst loop overhead on the plateau, period − G − T_iss^0 (median).
- R: V / T_period over the drain-limited zero-gap points only, detected by their backpressure
  (median issue time ≥ 2 × T_iss^0); the median over those points, uncertainty = half the IQR.
- Q(K): from the isolated-burst knee, once from the per-launch tail (p90) and once from the median
  issue time. Per K, the knee lies between the last volume whose issue time stays within 15 % of
  its recovered trend T_iss^0(K, B) and the first that leaves it; V_knee is their geometric mean
  and Q = V_knee − R·T_iss^0(V_knee) (spec §3), ± half the bracket. Without isolated points, Q is
  the one value that best explains the periodic transients through the recurrence (reported with
  that source).
- Prediction with no refit: Eq. 1 steady state for every periodic point, and the §4 recurrence
  with capacity (stalled trajectory) over the launch's bursts for every periodic point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.recurrence import stalled_trajectory

PLATEAU_TOLERANCE = 0.10
RECOVERED_GAP_FACTOR = 1.5  # a periodic launch counts as recovered when G ≥ 1.5·V/R
BACKPRESSURE_FACTOR = 2.0
KNEE_FACTOR = 1.15
UNEXPLAINED_PCT = 10.0
DEFAULT_BURSTS = 64
DEFAULT_WARMUP = 16


@dataclass
class CalibrationFit:
    """The fitted M_X with its uncertainties, the per-point predictions and the error summary."""

    model: PlatformModel
    rate_uncertainty_gbps: float | None
    rate_points: int
    rate_by_producers: dict[int, float]
    capacity_p90_bytes: dict[int, float]
    capacity_median_bytes: dict[int, float]
    capacity_uncertainty_bytes: dict[int, float]
    capacity_source: str | None
    capacity_reason: str | None
    points: pd.DataFrame
    errors: dict = field(default_factory=dict)


def _issue_floors(p: pd.DataFrame, rate_gbps: float | None = None) -> dict[tuple[int, int], float]:
    """Plateau issue time per (K, B); with a rate, only launches recovered by construction count
    (isolated, or periodic with G ≥ 1.5·V/R), and a (K, B) without one is left out (interpolated later)."""
    if rate_gbps is not None:
        p = p[(p["mode"] == "isolated") | (p["gap_ns"] >= RECOVERED_GAP_FACTOR * p["V"] / rate_gbps)]
    out = {}
    for (k, b), g in p.groupby(["K", "B"]):  # one group per (K, B) configuration
        t = g["tiss_med_ns"].to_numpy()
        floor = t.min()
        out[(int(k), int(b))] = float(np.median(t[t <= floor * (1 + PLATEAU_TOLERANCE)]))
    return out


def _rate(p: pd.DataFrame, floors: dict) -> tuple[float | None, float | None, int, dict]:
    per = p[(p["mode"] == "periodic") & (p["gap_ns"] == 0)]
    t0 = np.array([floors[(int(k), int(b))] for k, b in zip(per["K"], per["B"])])
    drain_limited = per["tiss_med_ns"].to_numpy() >= BACKPRESSURE_FACTOR * t0
    d = per[drain_limited]
    if d.empty:
        return None, None, 0, {}
    r = (d["V"] / d["period_med_ns"]).to_numpy()
    q25, q50, q75 = np.percentile(r, [25, 50, 75])
    by_k = {int(k): float(np.median(g["V"] / g["period_med_ns"])) for k, g in d.groupby("K")}
    return float(q50), float((q75 - q25) / 2), int(len(d)), by_k


def _knee_capacity(iso: pd.DataFrame, column: str, rate: float, floor_of) -> dict[int, tuple[float, float]]:
    """Spec §3 per K: bracket the knee in one issue-time column, Q = V_knee − R·T_iss^0(V_knee) ± half bracket."""
    out: dict[int, tuple[float, float]] = {}
    for k, g in iso.groupby("K"):  # per producer count
        g = g.sort_values("V")
        v = g["V"].to_numpy(dtype=np.float64)
        trend = floor_of(g["K"].to_numpy(), g["B"].to_numpy())
        over = g[column].to_numpy() > KNEE_FACTOR * trend
        if not over.any() or over[0]:
            continue
        first = int(np.argmax(over))
        v_lo, v_hi = v[first - 1], v[first]
        v_knee = float(np.sqrt(v_lo * v_hi))
        t0 = float(floor_of([k], [v_knee / k])[0])
        q = v_knee - rate * t0
        out[int(k)] = (q, (v_hi - v_lo) / 2)
    return out


def predict(points: pd.DataFrame, model: PlatformModel) -> pd.DataFrame:
    """Steady-state (Eq. 1) and recurrence predictions for every periodic point, with % errors."""
    p = points[points["mode"] == "periodic"].copy()
    t0 = model.floor_ns(p["K"].to_numpy(), p["B"].to_numpy())
    g = p["gap_ns"].to_numpy(dtype=np.float64)
    o = model.loop_overhead_ns
    drain = p["V"].to_numpy(dtype=np.float64) / model.rate_gbps
    p["issue_floor_ns"] = t0
    p["pred_period_ss_ns"] = np.maximum(t0 + g + o, drain)
    p["pred_issue_ss_ns"] = np.maximum(t0, drain - g - o)
    if model.capacity_by_producers:
        bursts = p["bursts"].fillna(DEFAULT_BURSTS).astype(int).to_numpy() if "bursts" in p else np.full(len(p), DEFAULT_BURSTS)
        warm = np.full(len(p), DEFAULT_WARMUP)
        # All launches at once: one long sequence with a capacity reset (a huge recovery gap) between launches.
        n_tot = int(bursts.sum())
        launch = np.repeat(np.arange(len(p)), bursts)
        idx = np.arange(n_tot) - np.repeat(np.cumsum(bursts) - bursts, bursts)
        last = idx == np.repeat(bursts - 1, bursts)
        gap_seq = np.where(last, 1e15, g[launch])
        traj = stalled_trajectory(p["V"].to_numpy(dtype=np.float64)[launch], gap_seq, t0[launch], model.rate_gbps,
                                  model.capacity(p["K"].to_numpy())[launch], o)
        period = np.where(last, np.nan, traj["issue_ns"].to_numpy() + g[launch] + o)
        use = (idx >= warm[launch]) & ~last
        frame = pd.DataFrame({"launch": launch[use], "period": period[use], "issue": traj["issue_ns"].to_numpy()[use]})
        med = frame.groupby("launch").median()
        p["pred_period_rec_ns"] = med["period"].reindex(np.arange(len(p))).to_numpy()
        p["pred_issue_rec_ns"] = med["issue"].reindex(np.arange(len(p))).to_numpy()
    meas = p["period_med_ns"].to_numpy()
    p["period_err_ss_pct"] = 100 * np.abs(p["pred_period_ss_ns"] - meas) / meas
    p["issue_err_ss_pct"] = 100 * np.abs(p["pred_issue_ss_ns"] - p["tiss_med_ns"]) / p["tiss_med_ns"]
    if "pred_period_rec_ns" in p:
        p["period_err_rec_pct"] = 100 * np.abs(p["pred_period_rec_ns"] - meas) / meas
        p["issue_err_rec_pct"] = 100 * np.abs(p["pred_issue_rec_ns"] - p["tiss_med_ns"]) / p["tiss_med_ns"]
    return p


def _error_summary(pred: pd.DataFrame) -> dict:
    out: dict = {}
    for tag in ("ss", "rec"):
        col = f"period_err_{tag}_pct"
        if col not in pred:
            continue
        out[tag] = {
            "period_err_median_pct": float(pred[col].median()),
            "period_err_mean_pct": float(pred[col].mean()),
            "issue_err_median_pct": float(pred[f"issue_err_{tag}_pct"].median()),
            "issue_err_mean_pct": float(pred[f"issue_err_{tag}_pct"].mean()),
            "by_producers": {
                int(k): {"period_err_median_pct": float(g[col].median()), "period_err_mean_pct": float(g[col].mean()),
                         "issue_err_median_pct": float(g[f"issue_err_{tag}_pct"].median()),
                         "issue_err_mean_pct": float(g[f"issue_err_{tag}_pct"].mean())}
                for k, g in pred.groupby("K")
            },
            "unexplained": pred.loc[pred[col] > UNEXPLAINED_PCT, ["K", "B", "gap_ns", "period_med_ns", col]].to_dict("records"),
        }
    return out


def _capacity_from_transients(points: pd.DataFrame, base: PlatformModel) -> dict[int, float]:
    """Without isolated points: the Q (log grid, 64 KiB … 1 GiB) whose recurrence best explains the periodic sweep."""
    grid = np.geomspace(64 * 1024, 1 << 30, 97)
    best, best_err = None, np.inf
    for q in grid:  # 97 candidate capacities; each prediction is vectorized over all launches and bursts
        m = PlatformModel(base.rate_gbps, base.issue_floor_ns, {int(k): float(q) for k in points["K"].unique()},
                          base.loop_overhead_ns, base.platform, base.store_path)
        err = float(predict(points, m)["period_err_rec_pct"].mean())
        if err < best_err - 1e-9:
            best, best_err = float(q), err
    return {int(k): best for k in points["K"].unique()}


def fit_calibration(points: pd.DataFrame, platform: str = "", store_path: str | None = None) -> CalibrationFit:
    """Spec §3: fit (T_iss^0(K,B), R, Q) and predict the periodic sweep (Eq. 1 and §4 recurrence) with no refit."""
    p = points.copy()
    if store_path is None:
        dests = sorted(p["dest"].unique())
        if len(dests) != 1:
            raise ValueError(f"points hold several store paths {dests}; fit one at a time")
        store_path = dests[0]
    p = p[p["dest"] == store_path].reset_index(drop=True)
    rate, rate_unc, n_rate, by_k = _rate(p, _issue_floors(p))
    if rate is None:
        # No backpressured zero-gap point: the path was never drain-limited in this sweep.
        per0 = p[(p["mode"] == "periodic") & (p["gap_ns"] == 0)]
        lower = float((per0["V"] / per0["period_med_ns"]).max()) if len(per0) else float("nan")
        model = PlatformModel(lower, _issue_floors(p), None, 0.0, platform, store_path)
        return CalibrationFit(model, None, 0, {}, {}, {}, {}, None,
                              f"no drain-limited zero-gap point: R >= {lower:.0f} GB/s (lower bound), Q not identifiable", p, {})
    floors = _issue_floors(p, rate)
    plateau = p[(p["mode"] == "periodic") & (p["gap_ns"] > 0) & (p["gap_ns"] >= RECOVERED_GAP_FACTOR * p["V"] / rate)]
    plateau = plateau[[kb in floors for kb in zip(plateau["K"].astype(int), plateau["B"].astype(int))]]
    t0 = np.array([floors[(int(k), int(b))] for k, b in zip(plateau["K"], plateau["B"])])
    o = float(np.median(plateau["period_med_ns"].to_numpy() - plateau["gap_ns"].to_numpy() - t0)) if len(plateau) else 0.0
    base = PlatformModel(rate, floors, None, max(o, 0.0), platform, store_path)
    iso = p[p["mode"] == "isolated"]
    q_p90: dict = {}
    q_med: dict = {}
    q_unc: dict = {}
    source = reason = None
    if len(iso):
        knee_tail = _knee_capacity(iso, "tiss_p90_ns", rate, base.floor_ns)
        q_p90 = {k: q for k, (q, _) in knee_tail.items()}
        q_unc = {k: u for k, (_, u) in knee_tail.items()}
        q_med = {k: q for k, (q, _) in _knee_capacity(iso, "tiss_med_ns", rate, base.floor_ns).items()}
        if q_p90:
            source = "isolated-burst knee (p90 tail)"
        else:
            reason = "isolated bursts never left the recovered floor: Q exceeds the largest isolated volume"
    capacity = q_p90 or None
    if capacity is None and not len(iso):
        capacity = _capacity_from_transients(p, base)
        source = "periodic transients through the recurrence (no isolated points in the input)"
    model = PlatformModel(rate, floors, capacity, base.loop_overhead_ns, platform, store_path)
    pred = predict(p, model)
    fit = CalibrationFit(model, rate_unc, n_rate, by_k, q_p90, q_med, q_unc, source, reason if capacity is None else None, pred)
    fit.errors = _error_summary(pred)
    return fit
