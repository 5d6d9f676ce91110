"""Fit the platform model M_X from calibration points and predict a sweep with no refit (docs/model.md §3).

Input: one row per launch with dest, mode (periodic | isolated), K, B, V, gap_ns, tiss_med_ns,
tiss_p90_ns, period_med_ns (the calibration benchmark's reduction or the reference CSV), and
optionally store (the store instruction, stg | bulk | tensor2d; points without it are st.global, "stg"). One
fit is one store path and one store instruction: M_X differs between them (docs/model.md §1: "calibrated
once per platform and store path"; on the H200 host path bulk copies drain at another rate).

- T_iss^0(K, B): the large-gap plateau, i.e. the recovered launches of that (K, B) (isolated, or
  periodic with G ≥ 1.5·V/R(K)) whose median issue time sits within 10 % of the smallest one;
  isolated volumes past the knee take the floor trend extrapolated from below the knee
  (calibration_capacity.floor_trend_ns), not their own median.
- R: V / T_period over the drain-limited periodic launches (median issue time ≥ 2 × T_iss^0, at
  any G: there Eq. 1 gives T_period = V/R whatever the gap), the median over them (± half the IQR).
  R(K): the median over one K's launches; it replaces the pooled R for that K where the two medians
  differ by more than the larger half-IQR, else that K uses the pooled R. R(K, B): the median over
  one (K, B)'s launches (4–9 gaps each on the H200 sweeps); prediction uses it, log-linear in B
  between the measured B of a K and the nearest one's value outside them (on the H200 host path
  the drain rate moves with B at fixed K by up to 40 %, far beyond its spread over the gaps).
  The pooled R stays the single-R summary, R(K) the per-K one.
- o: per-burst loop overhead on the plateau, period − G − T_iss^0 (median).
- Q(K): calibration_capacity (persistent isolated knee with the periodic transients, bootstrap
  interval).
- Prediction with no refit, both lines for every periodic point: "Eq. 1 + loop overhead",
  T_period = max(T_iss^0 + G + o, V/R(K, B)), and the §4 stalled recurrence with Q(K), R(K, B) and
  o over the launch's bursts. Isolated points: the law T_iss^iso = max(T_iss^0, (V − Q)/R) where the excess
  V − R·T_iss^0 exceeds Q (burst_gap.isolated_issue_time_ns), scored against the median and the
  p90 issue time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from xstage_trace.analysis.burst_gap import isolated_issue_time_ns
from xstage_trace.analysis.calibration_crossrun import compare_runs
from xstage_trace.analysis.calibration_capacity import BOOTSTRAP_SEED, CapacityEstimate, estimate_capacity, isolated_knee
from xstage_trace.base.config import DEFAULT_STORE
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.recurrence import stalled_trajectory

PLATEAU_TOLERANCE = 0.10
RECOVERED_GAP_FACTOR = 1.5  # a periodic launch counts as recovered when G ≥ 1.5·V/R
BACKPRESSURE_FACTOR = 2.0
UNEXPLAINED_PCT = 10.0
REGIME_CAPACITY_PCT = 1.0  # the recurrence this far off Eq. 1 + o: the launch's period is set by Q
DEFAULT_BURSTS = 64
DEFAULT_WARMUP = 16
CAPACITY_GRID_BYTES = np.geomspace(64 * 1024, 1 << 30, 113)  # 9 % steps


class UnrecoveredSweep(ValueError):
    """No launch of the sweep recovered between bursts (isolated, or periodic with G ≥ 1.5·V/R(K), R the fitted
    rate or, where no launch is drain-limited, its lower bound), so no issue floor T_iss^0(K, B) is identified
    (docs/model.md §3) and nothing can be predicted: a floor read off backpressured launches would be their
    drain time."""


def _unrecovered(store_path: str, store: str) -> UnrecoveredSweep:
    return UnrecoveredSweep(f"the {store_path}/{store} points hold no recovered launch (isolated, or periodic with a gap of at least "
                            f"{RECOVERED_GAP_FACTOR}·V/R), so the issue floor T_iss^0 is not identified")


@dataclass(frozen=True)
class CalibratedPlatform(PlatformModel):
    """M_X with the drain rate per producer count R(K) and per configuration R(K, B); rate_gbps
    stays the pooled single R."""

    rate_by_producers_gbps: dict[int, float] = field(default_factory=dict)
    rate_by_configuration_gbps: dict[tuple[int, int], float] = field(default_factory=dict)

    def rate(self, producers, bytes_per_producer=None) -> np.ndarray:
        """R at the nearest calibrated K: R(K, B) log-linear in B between that K's measured B (the
        nearest one's value outside them) where B is given and the K has configurations, else
        R(K) (the pooled R where no K has its own)."""
        K = np.atleast_1d(np.asarray(producers, dtype=np.float64))
        if not self.rate_by_producers_gbps:
            out = np.full(K.shape, self.rate_gbps)
        else:
            ks = np.array(sorted(self.rate_by_producers_gbps), dtype=np.float64)
            nearest = ks[np.argmin(np.abs(K[:, None] - ks[None, :]), axis=1)]
            out = np.array([self.rate_by_producers_gbps[int(k)] for k in nearest], dtype=np.float64).reshape(K.shape)
        if bytes_per_producer is None or not self.rate_by_configuration_gbps:
            return out
        B = np.broadcast_to(np.asarray(bytes_per_producer, dtype=np.float64), K.shape)
        conf = np.array(sorted(self.rate_by_configuration_gbps), dtype=np.float64)
        kc = np.unique(conf[:, 0])
        near = kc[np.argmin(np.abs(K[:, None] - kc[None, :]), axis=1)]
        for k in kc:  # one pass per calibrated K (a handful), vectorized over the queries
            sel = near == k
            bk = conf[conf[:, 0] == k, 1]
            rk = np.array([self.rate_by_configuration_gbps[(int(k), int(b))] for b in bk])
            out[sel] = np.interp(np.log(B[sel]), np.log(bk), rk)  # np.interp holds the end values outside
        return out


def rates_of(model: PlatformModel, producers, bytes_per_producer=None) -> np.ndarray:
    """R per launch for any PlatformModel: R(K, B) / R(K) of a CalibratedPlatform, else the single R."""
    if isinstance(model, CalibratedPlatform):
        return model.rate(producers, bytes_per_producer)
    return np.full(np.atleast_1d(producers).shape, model.rate_gbps, dtype=np.float64)


@dataclass(frozen=True)
class RateFit:
    """Pooled R, R(K) and R(K, B) from the drain-limited periodic launches."""

    rate_gbps: float
    uncertainty_gbps: float
    points: int
    measured_by_producers: dict[int, dict]  # K → rate_gbps, uncertainty_gbps, points, differs
    used_by_producers: dict[int, float]  # K → R(K), every K of the sweep
    by_configuration: dict[tuple[int, int], dict]  # (K, B) → rate_gbps (used in prediction), uncertainty_gbps, points


@dataclass
class CalibrationFit:
    """The fitted M_X with its uncertainties, the per-point predictions and the error summaries."""

    model: PlatformModel
    rates: RateFit | None
    capacity: dict[int, CapacityEstimate]
    capacity_reason: str | None
    points: pd.DataFrame  # periodic points with predictions
    isolated: pd.DataFrame  # isolated points with the law's prediction
    errors: dict = field(default_factory=dict)  # "ss" (Eq. 1 + loop overhead), "rec" (recurrence)
    isolated_errors: dict = field(default_factory=dict)
    store: str = DEFAULT_STORE  # the store instruction of the fitted points (stg | bulk | tensor2d)

    @property
    def rate_points(self) -> int:
        """Drain-limited periodic launches behind R (0: R is only a lower bound)."""
        return self.rates.points if self.rates else 0

    @property
    def capacity_source(self) -> str | None:
        """Where Q came from, joined over K."""
        s = sorted({c.source for c in self.capacity.values() if c.q_bytes is not None})
        return "; ".join(s) or None


def _issue_floors(p: pd.DataFrame, rate_by_k: dict[int, float] | None = None) -> dict[tuple[int, int], float]:
    """Plateau issue time per (K, B); with rates, only launches recovered by construction count
    (isolated, or periodic with G ≥ 1.5·V/R(K)), and a (K, B) without one is left out (interpolated later)."""
    if rate_by_k is not None:
        r = p["K"].map(rate_by_k).to_numpy(dtype=np.float64)
        p = p[(p["mode"] == "isolated") | (p["gap_ns"].to_numpy() >= RECOVERED_GAP_FACTOR * p["V"].to_numpy() / r)]
    out = {}
    for (k, b), g in p.groupby(["K", "B"]):  # one group per (K, B) configuration
        t = g["tiss_med_ns"].to_numpy()
        floor = t.min()
        out[(int(k), int(b))] = float(np.median(t[t <= floor * (1 + PLATEAU_TOLERANCE)]))
    return out


def _half_iqr(x: np.ndarray) -> float:
    q25, q75 = np.percentile(x, [25, 75])
    return float((q75 - q25) / 2)


def _drain_limited(p: pd.DataFrame, floors: dict) -> pd.DataFrame:
    """Periodic launches whose median issue time is ≥ 2 × T_iss^0 of their (K, B): backpressured,
    so by Eq. 1 their period is V/R at whatever gap they ran."""
    per = p[p["mode"] == "periodic"]
    t0 = np.array([floors[(int(k), int(b))] for k, b in zip(per["K"], per["B"])])
    return per[per["tiss_med_ns"].to_numpy() >= BACKPRESSURE_FACTOR * t0]


def _rates(p: pd.DataFrame, floors: dict) -> RateFit | None:
    """R = V / T_period over the drain-limited launches: pooled, per K and per (K, B) (docs/model.md §3)."""
    d = _drain_limited(p, floors)
    if d.empty:
        return None
    d = d.assign(rate=(d["V"] / d["period_med_ns"]).to_numpy())
    pooled, unc = float(d["rate"].median()), _half_iqr(d["rate"].to_numpy())
    measured, used = {}, {}
    for k, g in d.groupby("K"):  # per producer count
        rk = g["rate"].to_numpy()
        med, u = float(np.median(rk)), _half_iqr(rk)
        differs = len(rk) >= 2 and abs(med - pooled) > max(u, unc)
        measured[int(k)] = {"rate_gbps": med, "uncertainty_gbps": u, "points": int(len(rk)), "differs": bool(differs)}
        used[int(k)] = med if differs else pooled
    used.update({int(k): pooled for k in p["K"].unique() if int(k) not in used})  # K without drain-limited launches
    conf = {(int(k), int(b)): {"rate_gbps": float(g["rate"].median()), "uncertainty_gbps": _half_iqr(g["rate"].to_numpy()),
                               "points": int(len(g))}
            for (k, b), g in d.groupby(["K", "B"])}
    return RateFit(pooled, unc, int(len(d)), measured, dict(sorted(used.items())), conf)


def _launch_bursts(p: pd.DataFrame) -> np.ndarray:
    if "bursts" in p:
        return p["bursts"].fillna(DEFAULT_BURSTS).astype(int).to_numpy()
    return np.full(len(p), DEFAULT_BURSTS)


def recurrence_medians(volume_bytes, gap_ns, floor_ns, rate_gbps, capacity_bytes, loop_overhead_ns: float,
                       bursts: np.ndarray, warmup: int = DEFAULT_WARMUP) -> tuple[np.ndarray, np.ndarray]:
    """docs/model.md §4 stalled recurrence over each launch's bursts (capacity empty at launch start):
    median period and median issue time over bursts ≥ warmup, per launch (arrays of launches)."""
    n = len(bursts)
    n_tot = int(bursts.sum())
    if n_tot == 0:  # no launch (or none with a burst): the recurrence has nothing to run over
        return np.full(n, np.nan), np.full(n, np.nan)
    launch = np.repeat(np.arange(n), bursts)
    idx = np.arange(n_tot) - np.repeat(np.cumsum(bursts) - bursts, bursts)
    last = idx == np.repeat(bursts - 1, bursts)
    g = np.asarray(gap_ns, dtype=np.float64)[launch]
    # all launches in one sequence: a huge recovery gap after each launch's last burst empties the backlog
    traj = stalled_trajectory(np.asarray(volume_bytes, dtype=np.float64)[launch], np.where(last, 1e15, g),
                              np.asarray(floor_ns, dtype=np.float64)[launch], np.asarray(rate_gbps, dtype=np.float64)[launch],
                              np.asarray(capacity_bytes, dtype=np.float64)[launch], loop_overhead_ns)
    issue = traj["issue_ns"].to_numpy()
    use = (idx >= warmup) & ~last
    frame = pd.DataFrame({"launch": launch[use], "period": issue[use] + g[use] + loop_overhead_ns, "issue": issue[use]})
    med = frame.groupby("launch").median().reindex(np.arange(n))
    return med["period"].to_numpy(), med["issue"].to_numpy()


def predict(points: pd.DataFrame, model: PlatformModel) -> pd.DataFrame:
    """Eq. 1 + loop overhead and the §4 recurrence for every periodic point, with % errors.

    Columns pred_period_ss_ns / pred_issue_ss_ns: Eq. 1 with the loop overhead,
    T_period = max(T_iss^0 + G + o, V/R), T_iss = max(T_iss^0, V/R − G − o); *_rec_ns: the recurrence.
    ``regime``: which term sets the predicted period: ``capacity`` (the recurrence's period is
    more than REGIME_CAPACITY_PCT off Eq. 1 + o: Q decides, a transient or a capacity stall),
    ``drain_limited`` (V/R ≥ T_iss^0 + G + o) or ``floor`` (T_iss^0 + G + o).
    """
    p = points[points["mode"] == "periodic"].copy()
    k = p["K"].to_numpy()
    t0 = model.floor_ns(k, p["B"].to_numpy())
    g = p["gap_ns"].to_numpy(dtype=np.float64)
    o = model.loop_overhead_ns
    r = rates_of(model, k, p["B"].to_numpy())
    drain = p["V"].to_numpy(dtype=np.float64) / r
    p["issue_floor_ns"] = t0
    p["rate_gbps"] = r
    p["pred_period_ss_ns"] = np.maximum(t0 + g + o, drain)
    p["pred_issue_ss_ns"] = np.maximum(t0, drain - g - o)
    p["regime"] = np.where(drain >= t0 + g + o, "drain_limited", "floor")
    if model.capacity_by_producers:
        per, iss = recurrence_medians(p["V"].to_numpy(), g, t0, r, model.capacity(k), o, _launch_bursts(p))
        p["pred_period_rec_ns"], p["pred_issue_rec_ns"] = per, iss
        p.loc[np.abs(per / p["pred_period_ss_ns"].to_numpy() - 1) > REGIME_CAPACITY_PCT / 100, "regime"] = "capacity"
    meas = p["period_med_ns"].to_numpy()
    p["period_err_ss_pct"] = 100 * np.abs(p["pred_period_ss_ns"] - meas) / meas
    p["issue_err_ss_pct"] = 100 * np.abs(p["pred_issue_ss_ns"] - p["tiss_med_ns"]) / p["tiss_med_ns"]
    if "pred_period_rec_ns" in p:
        p["period_err_rec_pct"] = 100 * np.abs(p["pred_period_rec_ns"] - meas) / meas
        p["issue_err_rec_pct"] = 100 * np.abs(p["pred_issue_rec_ns"] - p["tiss_med_ns"]) / p["tiss_med_ns"]
    return p


def predict_isolated(points: pd.DataFrame, model: PlatformModel) -> pd.DataFrame:
    """docs/model.md §3 isolated law for every isolated point, with % errors against the median and p90 issue time."""
    p = points[points["mode"] == "isolated"].copy()
    if p.empty or not model.capacity_by_producers:
        return p.iloc[0:0]
    k = p["K"].to_numpy()
    t0 = model.floor_ns(k, p["B"].to_numpy())
    p["issue_floor_ns"] = t0
    p["pred_issue_iso_ns"] = isolated_issue_time_ns(p["V"].to_numpy(), rates_of(model, k, p["B"].to_numpy()), t0, model.capacity(k))
    for col, tag in (("tiss_med_ns", "med"), ("tiss_p90_ns", "p90")):
        p[f"iso_err_{tag}_pct"] = 100 * np.abs(p["pred_issue_iso_ns"] - p[col]) / p[col]
    return p


def _error_summary(pred: pd.DataFrame) -> dict:
    """Period and issue errors of each line: all launches, by K and by regime (predict's ``regime``)."""
    out: dict = {}
    for tag in ("ss", "rec"):
        col = f"period_err_{tag}_pct"
        if col not in pred:
            continue

        def part(g: pd.DataFrame) -> dict:
            return {"period_err_median_pct": float(g[col].median()), "period_err_mean_pct": float(g[col].mean()),
                    "issue_err_median_pct": float(g[f"issue_err_{tag}_pct"].median()),
                    "issue_err_mean_pct": float(g[f"issue_err_{tag}_pct"].mean())}

        out[tag] = {
            **part(pred),
            "by_producers": {int(k): part(g) for k, g in pred.groupby("K")},
            "by_regime": {str(r): dict(part(g), points=int(len(g))) for r, g in pred.groupby("regime")},
            "unexplained": pred.loc[pred[col] > UNEXPLAINED_PCT, ["K", "B", "gap_ns", "period_med_ns", col]].to_dict("records"),
        }
    return out


def _isolated_summary(iso: pd.DataFrame) -> dict:
    """Isolated-law errors vs the median and the p90 issue time: all launches, and split by whether
    the law predicts a stall (excess V − R·T_iss^0 over Q: "beyond_q") or the floor ("within_q")."""
    if iso.empty:
        return {}
    beyond = (iso["pred_issue_iso_ns"] > iso["issue_floor_ns"]).to_numpy()
    out: dict = {"points": int(len(iso)), "points_beyond_q": int(beyond.sum())}
    for tag, name in (("med", "vs_median"), ("p90", "vs_p90")):
        col = iso[f"iso_err_{tag}_pct"]
        part = lambda c: {"issue_err_median_pct": float(c.median()), "issue_err_mean_pct": float(c.mean())} if len(c) else None  # noqa: E731
        out[name] = dict(part(col), within_q=part(col[~beyond]), beyond_q=part(col[beyond]),
                         by_producers={int(k): part(g) for k, g in col.groupby(iso["K"])})
    return out


def _transient_errors(per: pd.DataFrame, base: CalibratedPlatform) -> np.ndarray:
    """Recurrence period error (%) of every periodic launch (rows) for every Q of the grid (columns)."""
    n, m = len(per), len(CAPACITY_GRID_BYTES)
    k, b = per["K"].to_numpy(), per["B"].to_numpy()
    t0 = base.floor_ns(k, b)
    r = base.rate(k, b)
    rep = lambda x: np.tile(np.asarray(x), m)  # noqa: E731 (grid-major copies of every launch)
    period, _ = recurrence_medians(rep(per["V"].to_numpy()), rep(per["gap_ns"].to_numpy()), rep(t0), rep(r),
                                   np.repeat(CAPACITY_GRID_BYTES, n), base.loop_overhead_ns, rep(_launch_bursts(per)))
    meas = per["period_med_ns"].to_numpy()
    return (100 * np.abs(period.reshape(m, n) - meas[None, :]) / meas[None, :]).T


def _loop_overhead(p: pd.DataFrame, floors: dict, rate_by_k: dict[int, float]) -> float:
    """o: median of period − G − T_iss^0 over the recovered periodic launches with G > 0 (docs/model.md §4), ≥ 0."""
    plateau = p[(p["mode"] == "periodic") & (p["gap_ns"] > 0)
                & (p["gap_ns"].to_numpy() >= RECOVERED_GAP_FACTOR * p["V"].to_numpy() / p["K"].map(rate_by_k).to_numpy())]
    plateau = plateau[[kb in floors for kb in zip(plateau["K"].astype(int), plateau["B"].astype(int))]]
    if plateau.empty:
        return 0.0
    t0 = np.array([floors[(int(k), int(b))] for k, b in zip(plateau["K"], plateau["B"])])
    return max(float(np.median(plateau["period_med_ns"].to_numpy() - plateau["gap_ns"].to_numpy() - t0)), 0.0)


def store_of(points: pd.DataFrame) -> pd.Series:
    """Each point's store instruction: its ``store`` column, DEFAULT_STORE where absent or empty."""
    if "store" not in points.columns:
        return pd.Series(DEFAULT_STORE, index=points.index, dtype=object)
    return points["store"].astype(object).where(points["store"].notna(), DEFAULT_STORE).astype(str)


def fit_calibration(points: pd.DataFrame, platform: str = "", store_path: str | None = None,
                    store: str | None = None) -> CalibrationFit:
    """docs/model.md §3: fit (T_iss^0(K,B), R(K), Q(K), o) and predict the sweep (Eq. 1 + o, §4 recurrence, isolated law)
    over the points of one store path and one store instruction (``store``; required where they hold several)."""
    p = points.copy()
    if store_path is None:
        dests = sorted(p["dest"].unique())
        if len(dests) != 1:
            raise ValueError(f"points hold several store paths {dests}; fit one at a time")
        store_path = dests[0]
    p = p[p["dest"] == store_path]
    stores = store_of(p)
    if store is None:
        found = sorted(stores.unique())
        if len(found) != 1:
            raise ValueError(f"points of {store_path} hold several store instructions {found}; fit one at a time")
        store = found[0]
    p = p[stores == store].reset_index(drop=True)
    rates = _rates(p, _issue_floors(p))
    if rates is None:
        # No backpressured periodic launch: the path was never drain-limited in this sweep.
        per0 = p[(p["mode"] == "periodic") & (p["gap_ns"] == 0)]
        lower = float((per0["V"] / per0["period_med_ns"]).max()) if len(per0) else float("nan")
        if np.isfinite(lower) and not _issue_floors(p, {int(k): lower for k in p["K"].unique()}):  # none recovered at the bound
            raise _unrecovered(store_path, store)
        floors = _issue_floors(p)
        model = PlatformModel(lower, floors, None, _loop_overhead(p, floors, {int(k): lower for k in p["K"].unique()}), platform, store_path)
        fit = CalibrationFit(model, None, {}, f"no drain-limited periodic launch: R >= {lower:.0f} GB/s (lower bound), Q not identifiable",
                             predict(p, model), p.iloc[0:0], store=store)
        fit.errors = _error_summary(fit.points)
        return fit
    rate_by_k = rates.used_by_producers
    floors = _issue_floors(p, rate_by_k)
    if not floors:
        raise _unrecovered(store_path, store)
    iso = p[p["mode"] == "isolated"]
    for k, g in iso.groupby("K"):  # per producer count: past the knee, T_iss^0 is the trend from below it
        g = g.sort_values("V")
        v = g["V"].to_numpy(dtype=np.float64)
        knee, trend = isolated_knee(v, g["tiss_p90_ns"].to_numpy(dtype=np.float64), g["tiss_med_ns"].to_numpy(dtype=np.float64),
                                    rate_by_k[int(k)])
        if knee is None:
            continue
        for b, vv in zip(g["B"], v):
            if vv > knee.v_lo_bytes:
                floors[(int(k), int(b))] = float(trend(vv))
    rate_by_conf = {kb: c["rate_gbps"] for kb, c in rates.by_configuration.items()}
    base = CalibratedPlatform(rates.rate_gbps, floors, None, _loop_overhead(p, floors, rate_by_k), platform, store_path, rate_by_k, rate_by_conf)
    per = p[p["mode"] == "periodic"].reset_index(drop=True)
    err = _transient_errors(per, base) if len(per) else None
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    capacity: dict[int, CapacityEstimate] = {}
    for k in sorted(rate_by_k):  # per producer count: knee ∩ transients, bootstrap interval
        sel = per["K"].to_numpy() == k
        gi = iso[iso["K"] == k]
        capacity[k] = estimate_capacity(CAPACITY_GRID_BYTES, err[sel] if err is not None and sel.any() else None,
                                        gi["V"].to_numpy(dtype=np.float64), gi["tiss_p90_ns"].to_numpy(dtype=np.float64),
                                        gi["tiss_med_ns"].to_numpy(dtype=np.float64), rate_by_k[k], rng)
    caps = {k: c.q_bytes for k, c in capacity.items() if c.q_bytes is not None} or None
    reason = None
    if caps is None:
        reason = ("isolated bursts never left the recovered floor and the transients do not bound Q: Q exceeds the largest isolated volume"
                  if len(iso) else "the periodic transients do not depend on Q and there are no isolated launches")
    model = CalibratedPlatform(rates.rate_gbps, floors, caps, base.loop_overhead_ns, platform, store_path, rate_by_k, rate_by_conf)
    fit = CalibrationFit(model, rates, capacity, reason, predict(p, model), predict_isolated(p, model), store=store)
    fit.errors = _error_summary(fit.points)
    fit.isolated_errors = _isolated_summary(fit.isolated)
    return fit


@dataclass
class Validation:
    """A fit's model applied to another run with no refit: predictions and error summaries.

    errors_shared: the same summaries over the other run's periodic points whose (K, B, G) the
    fitting run also measured (no extrapolation in K, B or G: what differs is the day or machine).
    """

    points: pd.DataFrame
    isolated: pd.DataFrame
    errors: dict
    errors_shared: dict
    shared_points: int
    isolated_errors: dict
    measured_difference: dict  # calibration_crossrun.compare_runs: the two runs' raw measurements side by side


def validate(fit: CalibrationFit, other: pd.DataFrame, store_path: str | None = None, store: str | None = None) -> Validation:
    """Predict another run's sweep of a store path and store instruction (default: the fit's) with the
    fitted M_X, no refit."""
    p = other[(other["dest"] == (store_path or fit.model.store_path)) & (store_of(other) == (store or fit.store))].reset_index(drop=True)
    pred = predict(p, fit.model)
    iso = predict_isolated(p, fit.model)
    keys = ["K", "B", "gap_ns"]
    shared = pred.merge(fit.points[keys].drop_duplicates(), on=keys)
    return Validation(pred, iso, _error_summary(pred), _error_summary(shared), int(len(shared)), _isolated_summary(iso),
                      compare_runs(fit.points, p))
