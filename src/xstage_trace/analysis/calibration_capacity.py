"""Q(K) from the isolated-burst knee and the periodic transients, with a bootstrap interval (docs/model.md §3, §4).

Two kinds of evidence about the effective capacity Q of one producer count K:

- The *isolated knee*. A recovered burst issues at its floor T_iss^0(V) until its excess
  V − R·T_iss^0 exceeds Q (docs/model.md §3). Two detectors, both *persistent* (a knee is the first volume
  from which every larger volume is in excess, so one slow launch below it cannot make a knee):
  the *tail* — p90 above KNEE_TAIL_FACTOR × the launch's own median (some producers are held
  back while the body of the burst still issues at the floor; the floor's shape cancels) — and
  the *body* — the median above KNEE_BODY_FACTOR × the floor extrapolated from the points below
  (all producers held back, as in the spec's fluid model, where the tail detector sees nothing).
  The body detector extrapolates with the larger of the affine fit over the two octaves below and
  the proportional bound T_{i−1}·V/V_{i−1}: at small bursts a fixed cost dominates and the affine
  fit would undershoot the later bandwidth-like slope. The knee is the earlier of the two.
  V_lo (last point before it) and V_hi (its first point) bracket it; Q lies in
  [V_lo − R·T0(V_lo), V_hi − R·T0(V_hi)], with T0 the affine trend of the median over the points
  clearly below the knee (the KNEE_TREND_OCTAVES octaves under V_lo), extrapolated above it.
- The *periodic transients*. A periodic launch whose whole backlog stays inside Q never reaches
  the drain-limited state in its measured bursts; the §4 stalled recurrence with a given Q says
  which launches do. The per-launch period error of the recurrence, on a log grid of Q, is the
  transient evidence (computed once by the caller, a launches × grid matrix).

Estimate: inside the knee bracket (or above the knee's lower bound when the isolated issue never
left its floor, or anywhere when there are no isolated launches), the Q of smallest mean transient
error; a flat minimum is resolved to its geometric centre. Interval: 5th–95th percentile of that
estimate over bootstrap resamples of the launches (isolated and periodic, per K), R, T_iss^0 and o
held at the full fit, joined with the point estimate and with the range of Q the full data's
transients cannot tell apart (widened to the neighbouring grid points).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KNEE_TAIL_FACTOR = 1.05  # below the knee the p90 of a recovered burst sits < 1 % above its median on the H200 sweeps
KNEE_BODY_FACTOR = 1.15  # the floor's own departure from proportionality reaches ~11 % on the H200 sweeps
KNEE_TREND_OCTAVES = 2.0  # the bandwidth-like part of the floor: a fixed cost dominates further down
FLAT_TOLERANCE_PCT = 1e-6  # mean-error differences below this are ties (errors are step functions of Q)
BOOTSTRAP_RESAMPLES = 200
BOOTSTRAP_SEED = 0
INTERVAL_PERCENTILES = (5.0, 95.0)


@dataclass(frozen=True)
class Knee:
    """Isolated knee at one K: bracket in V and in Q (v_hi is None: no knee up to v_lo, Q ≥ q_lo)."""

    detector: str  # "tail" (p90 over the median), "body" (median over the floor), "none"
    v_lo_bytes: float
    v_hi_bytes: float | None
    q_lo_bytes: float
    q_hi_bytes: float | None


@dataclass(frozen=True)
class CapacityEstimate:
    """Q(K) with its bootstrap interval and the evidence it came from."""

    q_bytes: float | None
    interval_bytes: tuple[float, float] | None
    source: str
    knee: Knee | None
    transient_bytes: tuple[float, float] | None  # Q range the transients cannot tell apart (full data)


def floor_trend_ns(volume_bytes: np.ndarray, issue_ns: np.ndarray, below: np.ndarray):
    """Affine T_iss^0(V) = a + V·b fitted (relative least squares) over ``below`` points within
    KNEE_TREND_OCTAVES octaves of the largest of them; one point: proportional to V."""
    v, t = volume_bytes[below], issue_ns[below]
    top = v.max()
    use = v >= top / 2.0 ** KNEE_TREND_OCTAVES
    if use.sum() < 2:
        slope = float(t[v == top][0] / top)
        return lambda x: slope * np.asarray(x, dtype=np.float64)
    b, a = np.polyfit(v[use], t[use], 1, w=1.0 / t[use])
    return lambda x: a + b * np.asarray(x, dtype=np.float64)


def _persistent_from(over: np.ndarray) -> int | None:
    """First index from which every entry is True, None if the last one is False."""
    if not over[-1]:
        return None
    return 0 if over.all() else len(over) - int(np.argmin(over[::-1]))


def _body_knee_index(v: np.ndarray, med: np.ndarray) -> int | None:
    """First i ≥ 1 such that every median from i on exceeds KNEE_BODY_FACTOR × the floor extrapolated from below i."""
    for i in range(1, len(v)):  # ≤ 14 volumes per K
        trend = floor_trend_ns(v, med, np.arange(len(v)) < i)
        ref = np.maximum(trend(v[i:]), med[i - 1] * v[i:] / v[i - 1])
        if (med[i:] > KNEE_BODY_FACTOR * ref).all():
            return i
    return None


def isolated_knee(volume_bytes, p90_ns, median_ns, rate_gbps: float) -> tuple[Knee | None, object]:
    """docs/model.md §3 for one K: the persistent knee (earlier of tail and body detectors) and the floor
    trend T_iss^0(V) (callable V → ns); (None, None) with fewer than 2 volumes or no volume below a knee."""
    v = np.asarray(volume_bytes, dtype=np.float64)
    o = np.argsort(v)
    v, p90, med = v[o], np.asarray(p90_ns, dtype=np.float64)[o], np.asarray(median_ns, dtype=np.float64)[o]
    if len(v) < 2:
        return None, None
    found = {name: i for name, i in (("tail", _persistent_from(p90 > KNEE_TAIL_FACTOR * med)), ("body", _body_knee_index(v, med)))
             if i is not None}
    if not found:
        trend = floor_trend_ns(v, med, np.ones(len(v), bool))
        v_lo = float(v[-1])
        return Knee("none", v_lo, None, v_lo - rate_gbps * float(trend(v_lo)), None), trend
    detector = min(found, key=found.get)
    i = found[detector]
    if i == 0:
        return None, None  # in excess from the smallest volume: nothing below the knee
    trend = floor_trend_ns(v, med, np.arange(len(v)) < i)
    v_lo, v_hi = float(v[i - 1]), float(v[i])
    return Knee(detector, v_lo, v_hi, v_lo - rate_gbps * float(trend(v_lo)), v_hi - rate_gbps * float(trend(v_hi))), trend


def _allowed(q_grid: np.ndarray, knee: Knee | None) -> np.ndarray:
    if knee is None:
        return np.ones(len(q_grid), bool)
    if knee.q_hi_bytes is None:
        return q_grid >= knee.q_lo_bytes
    return (q_grid >= knee.q_lo_bytes) & (q_grid <= knee.q_hi_bytes)


def _widened(q_grid: np.ndarray, ties: np.ndarray, knee: Knee | None) -> tuple[float, float]:
    """The tie set's range, out to the neighbouring grid points (its true edges lie between them),
    clipped to the knee bracket."""
    idx = np.flatnonzero(ties)
    lo, hi = q_grid[max(idx[0] - 1, 0)], q_grid[min(idx[-1] + 1, len(q_grid) - 1)]
    if knee is not None:
        lo = max(lo, knee.q_lo_bytes)
        hi = min(hi, knee.q_hi_bytes) if knee.q_hi_bytes is not None else hi
    return float(lo), float(hi)


def choose_capacity(q_grid: np.ndarray, mean_err_pct: np.ndarray | None, knee: Knee | None) -> tuple[float | None, tuple[float, float] | None]:
    """The Q of smallest mean transient error inside what the knee allows; (estimate, range the
    transients cannot tell apart).

    A flat minimum resolves to its geometric centre. Where the transients do not tell Q apart
    inside what the knee allows (or there are none), a knee bracket gives its geometric centre
    and a knee lower bound alone gives nothing (None).
    """
    allowed = _allowed(q_grid, knee)
    flat = None
    if mean_err_pct is not None and allowed.any():
        e = np.where(allowed, mean_err_pct, np.inf)
        ties = e <= e.min() + FLAT_TOLERANCE_PCT
        flat = _widened(q_grid, ties, knee)
        if not (ties == allowed).all():
            return float(np.exp(np.log(q_grid[ties]).mean())), flat
    if knee is not None and knee.q_hi_bytes is not None:
        lo, hi = max(knee.q_lo_bytes, 1.0), max(knee.q_hi_bytes, 1.0)
        return float(np.sqrt(lo * hi)), flat
    return None, flat


def estimate_capacity(q_grid: np.ndarray, transient_err_pct: np.ndarray | None, iso_v: np.ndarray, iso_p90: np.ndarray,
                      iso_med: np.ndarray, rate_gbps: float, rng: np.random.Generator) -> CapacityEstimate:
    """Q(K) for one K: isolated knee ∩ transients, bootstrap interval over the launches.

    transient_err_pct: periodic launches × q_grid matrix of recurrence period errors (None: no
    periodic launches at this K). iso_*: the isolated launches of this K (may be empty).
    """
    knee = isolated_knee(iso_v, iso_p90, iso_med, rate_gbps)[0] if len(iso_v) >= 2 else None
    full_err = None if transient_err_pct is None else transient_err_pct.mean(axis=0)
    q, flat = choose_capacity(q_grid, full_err, knee)
    if q is None:
        return CapacityEstimate(None, None, "not identifiable", knee, flat)
    n_iso = len(iso_v)
    n_per = 0 if transient_err_pct is None else transient_err_pct.shape[0]
    draws = []
    for _ in range(BOOTSTRAP_RESAMPLES):  # 200 resamples; each is a few vectorized reductions
        kb = knee
        if n_iso >= 2:
            pick = np.unique(rng.integers(0, n_iso, n_iso))
            kb = isolated_knee(iso_v[pick], iso_p90[pick], iso_med[pick], rate_gbps)[0] if len(pick) >= 2 else None
        err = None
        if n_per:
            w = np.bincount(rng.integers(0, n_per, n_per), minlength=n_per) / n_per
            err = w @ transient_err_pct
        d, _ = choose_capacity(q_grid, err, kb)
        if d is not None:
            draws.append(d)
    lo, hi = np.percentile(draws, INTERVAL_PERCENTILES) if draws else (q, q)
    if knee is not None:
        source = f"isolated knee ({knee.detector} detector, persistent)" if knee.v_hi_bytes else "isolated floor up to the largest volume (Q above it)"
        source += " with the periodic transients" if n_per else ""
    else:
        source = "periodic transients through the recurrence (no isolated launches at this K)"
    if flat is not None:
        lo, hi = min(lo, flat[0]), max(hi, flat[1])
    return CapacityEstimate(q, (float(min(lo, q)), float(max(hi, q))), source, knee, flat)
