"""Q(K) from the isolated-burst knee and the periodic transients, with a bootstrap interval (spec §3, §4).

Two kinds of evidence about the effective capacity Q of one producer count K:

- The *isolated knee*. A recovered burst issues at its floor T_iss^0(V) until its excess
  V − R·T_iss^0 exceeds Q (spec §3). The knee is *persistent*: the first volume from which every
  larger volume issues more than KNEE_FACTOR above the floor trend. The trend is an upper bound
  on the floor there, T_j ≤ T_{i−1}·V_j / V_{i−1} (issue at the floor costs a fixed part plus a
  bandwidth part, so T/V never grows with V), which no single slow launch and no curvature at
  small bursts can turn into a knee. V_lo (last on the trend) and V_hi (first of the persistent
  excess) bracket the knee; Q lies in [V_lo − R·T0(V_lo), V_hi − R·T0(V_hi)], with T0 the affine
  trend fitted over the points clearly below the knee (the last KNEE_TREND_OCTAVES octaves
  under V_lo) and extrapolated above it.
- The *periodic transients*. A periodic launch whose whole backlog stays inside Q never reaches
  the drain-limited state in its measured bursts; the §4 stalled recurrence with a given Q says
  which launches do. The per-launch period error of the recurrence, on a log grid of Q, is the
  transient evidence (computed once by the caller, a launches × grid matrix).

Estimate: inside the knee bracket (or above the knee's lower bound when the isolated issue never
left its floor, or anywhere when there are no isolated launches), the Q of smallest mean transient
error; a flat minimum is resolved to its geometric centre. Interval: 5th–95th percentile of that
estimate over bootstrap resamples of the launches (isolated and periodic, per K), R, T_iss^0 and o
held at the full fit, joined with the point estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KNEE_FACTOR = 1.05  # the p90 tail of a recovered burst scatters < 1 % around its trend on the H200 sweeps
KNEE_TREND_OCTAVES = 2.0  # the bandwidth-like part of the floor: a fixed cost dominates further down
FLAT_TOLERANCE_PCT = 1e-6  # mean-error differences below this are ties (errors are step functions of Q)
BOOTSTRAP_RESAMPLES = 200
BOOTSTRAP_SEED = 0
INTERVAL_PERCENTILES = (5.0, 95.0)


@dataclass(frozen=True)
class Knee:
    """Isolated knee of one issue-time column at one K: bracket in V and in Q (v_hi is None: no knee)."""

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
    knee_p90: Knee | None
    knee_median: Knee | None
    transient_bytes: tuple[float, float] | None  # Q range of minimal transient error on the full data


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


def persistent_excess_index(issue_ns: np.ndarray, reference_ns: np.ndarray) -> int | None:
    """First index from which every point issues above KNEE_FACTOR × its reference, None without one."""
    over = np.asarray(issue_ns) > KNEE_FACTOR * np.asarray(reference_ns)
    if not over[-1]:
        return None
    i = len(over) - int(np.argmin(over[::-1])) if not over.all() else 0
    return i


def isolated_knee(volume_bytes, p90_ns, median_ns, rate_gbps: float) -> tuple[Knee | None, Knee | None, object]:
    """Spec §3 for one K: the p90 knee, the median knee and the floor trend (callable V → ns).

    p90 knee: the persistent excess of the tail over the launch's own median (a recovered burst's
    tail sits on its median; curvature of T_iss^0 at small volumes affects both alike). The floor
    trend T_iss^0(V) is the affine fit of the median over the points clearly below that knee,
    extrapolated above it; the median knee is the persistent excess of the median over that
    trend (the median CTA stalls too). Q brackets: V − R·T_iss^0(V) at the two sides of a knee.
    """
    v = np.asarray(volume_bytes, dtype=np.float64)
    o = np.argsort(v)
    v, p90, med = v[o], np.asarray(p90_ns, dtype=np.float64)[o], np.asarray(median_ns, dtype=np.float64)[o]
    if len(v) < 2:
        return None, None, None
    i = persistent_excess_index(p90, med)
    if i == 0:
        return None, None, None  # in excess from the smallest volume: no point below the knee
    n_below = len(v) if i is None else i
    trend = floor_trend_ns(v, med, np.arange(len(v)) < n_below)

    def knee(first: int | None, last_below: int) -> Knee:
        v_lo = float(v[last_below])
        q_lo = v_lo - rate_gbps * float(trend(v_lo))
        if first is None:
            return Knee(v_lo, None, q_lo, None)
        v_hi = float(v[first])
        return Knee(v_lo, v_hi, q_lo, v_hi - rate_gbps * float(trend(v_hi)))

    knee_p90 = knee(i, n_below - 1)
    j = persistent_excess_index(med[n_below:], trend(v[n_below:])) if n_below < len(v) else None
    knee_med = knee(None, len(v) - 1) if j is None else knee(n_below + j, n_below + j - 1)
    return knee_p90, knee_med, trend


def _allowed(q_grid: np.ndarray, knee: Knee | None) -> np.ndarray:
    if knee is None:
        return np.ones(len(q_grid), bool)
    if knee.q_hi_bytes is None:
        return q_grid >= knee.q_lo_bytes
    return (q_grid >= knee.q_lo_bytes) & (q_grid <= knee.q_hi_bytes)


def choose_capacity(q_grid: np.ndarray, mean_err_pct: np.ndarray | None, knee: Knee | None) -> tuple[float | None, tuple[float, float] | None]:
    """The Q of smallest mean transient error inside what the knee allows; (estimate, flat range).

    A flat minimum resolves to its geometric centre. Where the transients do not tell Q apart
    inside what the knee allows (or there are none), a knee bracket gives its geometric centre
    and a knee lower bound alone gives nothing (None).
    """
    allowed = _allowed(q_grid, knee)
    flat = None
    if mean_err_pct is not None and allowed.any():
        e = np.where(allowed, mean_err_pct, np.inf)
        ties = e <= e.min() + FLAT_TOLERANCE_PCT
        if not (ties == allowed).all():
            q = q_grid[ties]
            return float(np.exp(np.log(q).mean())), (float(q.min()), float(q.max()))
        flat = (float(q_grid[allowed].min()), float(q_grid[allowed].max()))
    if knee is not None and knee.q_hi_bytes is not None:
        lo, hi = max(knee.q_lo_bytes, 1.0), max(knee.q_hi_bytes, 1.0)
        return float(np.sqrt(lo * hi)), flat
    return None, flat


def estimate_capacity(q_grid: np.ndarray, transient_err_pct: np.ndarray | None, iso_v: np.ndarray, iso_p90: np.ndarray,
                      iso_med: np.ndarray, rate_gbps: float, rng: np.random.Generator) -> CapacityEstimate:
    """Q(K) for one K: knee (p90 column) ∩ transients, bootstrap interval over the launches.

    transient_err_pct: periodic launches × q_grid matrix of recurrence period errors (None: no
    periodic launches at this K). iso_*: the isolated launches of this K (may be empty).
    """
    knee_p90 = knee_med = None
    if len(iso_v) >= 2:
        knee_p90, knee_med, _ = isolated_knee(iso_v, iso_p90, iso_med, rate_gbps)
    full_err = None if transient_err_pct is None else transient_err_pct.mean(axis=0)
    q, flat = choose_capacity(q_grid, full_err, knee_p90)
    if q is None:
        return CapacityEstimate(None, None, "not identifiable", knee_p90, knee_med, flat)
    n_iso = len(iso_v)
    n_per = 0 if transient_err_pct is None else transient_err_pct.shape[0]
    draws = []
    for _ in range(BOOTSTRAP_RESAMPLES):  # 200 resamples; each is a few vectorized reductions
        kb = knee_p90
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
    if knee_p90 is not None and n_per:
        source = "isolated knee (p90, persistent) with the periodic transients"
    elif knee_p90 is not None:
        source = "isolated knee (p90, persistent)"
    else:
        source = "periodic transients through the recurrence (no isolated launches at this K)"
    return CapacityEstimate(q, (float(min(lo, q)), float(max(hi, q))), source, knee_p90, knee_med, flat)
