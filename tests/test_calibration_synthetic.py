"""The fit recovers a known M_X from a sweep generated with the spec's own equations.

The generator is written here from the spec text, burst by burst, and shares no code with the fit:
- periodic launch (§4 extension): T_iss,n = max(T_iss^0, (q_n + V − Q)/R),
  q_{n+1} = [q_n + V − R·(T_iss,n + G + o)]₊, q_0 = 0, period_n = T_iss,n + G + o; the bench
  reports medians over bursts 16…63 (period: start to next start, so 16…62);
- isolated burst (§3): T_iss^iso = T_iss^0 while V − R·T_iss^0 ≤ Q, else max(T_iss^0, (V − Q)/R);
  every producer sees the same time (fluid model), so median = p90.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.calibration_fit import fit_calibration, validate

MIB = 2**20
RATE_GBPS = {33: 90.0, 66: 66.0, 132: 66.0}  # K = 33 drains faster, as on the H200 host path
CAPACITY_BYTES = {33: 3 * MIB, 66: 8 * MIB, 132: 16 * MIB}
LOOP_OVERHEAD_NS = 120.0
GAPS_NS = [0, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000]
PERIODIC_B = [2048, 8192, 32768, 131072]
ISOLATED_B = [2048, 4096, 8192, 16384, 24576, 32768, 49152, 65536, 98304, 131072, 196608, 262144, 393216, 524288]


def inside(x, interval):
    """x within a closed interval, up to float rounding."""
    lo, hi = interval
    return lo * (1 - 1e-9) <= x <= hi * (1 + 1e-9)


def floor_ns(b):
    """T_iss^0: a fixed 150 ns plus 50 bytes/ns per producer."""
    return 150.0 + b / 50.0


def periodic_launch(k, b, g):
    v, r, q_cap, t0 = k * b, RATE_GBPS[k], CAPACITY_BYTES[k], floor_ns(b)
    q, issue, period = 0.0, [], []
    for _ in range(64):
        t = max(t0, (q + v - q_cap) / r)
        q = max(q + v - r * (t + g + LOOP_OVERHEAD_NS), 0.0)
        issue.append(t)
        period.append(t + g + LOOP_OVERHEAD_NS)
    return float(np.median(issue[16:64])), float(np.median(period[16:63]))


def isolated_burst(k, b):
    v, r, q_cap, t0 = k * b, RATE_GBPS[k], CAPACITY_BYTES[k], floor_ns(b)
    return t0 if v - r * t0 <= q_cap else max(t0, (v - q_cap) / r)


def sweep(noise_pct=0.0, seed=1):
    rng = np.random.default_rng(seed)
    rows = []
    for k in (33, 66, 132):
        for b in PERIODIC_B:
            for g in GAPS_NS:
                t, p = periodic_launch(k, b, g)
                rows.append(("periodic", k, b, g, t, t, p))
    for k in (66, 132):
        for b in ISOLATED_B:
            t = isolated_burst(k, b)
            gap = 10 * k * b / RATE_GBPS[k] + 30000  # gap ≫ V/R: every burst starts recovered
            rows.append(("isolated", k, b, gap, t, t, t + gap + LOOP_OVERHEAD_NS))
    df = pd.DataFrame(rows, columns=["mode", "K", "B", "gap_ns", "tiss_med_ns", "tiss_p90_ns", "period_med_ns"])
    df.insert(0, "dest", "host")
    df["V"] = df["K"] * df["B"]
    if noise_pct:
        for col in ("tiss_med_ns", "period_med_ns"):
            df[col] *= np.exp(rng.normal(0, noise_pct / 100, len(df)))
        df["tiss_p90_ns"] = df["tiss_med_ns"] * np.exp(np.abs(rng.normal(0, noise_pct / 100, len(df))))
    return df


@pytest.fixture(scope="module")
def exact_fit():
    return fit_calibration(sweep(), store_path="host")


def test_rate_per_producer_count_is_recovered(exact_fit):
    assert exact_fit.rates.used_by_producers == pytest.approx(RATE_GBPS, rel=1e-3)
    assert exact_fit.rates.measured_by_producers[33]["differs"]
    assert not exact_fit.rates.measured_by_producers[132]["differs"]
    assert exact_fit.model.rate_gbps == pytest.approx(66.0, rel=1e-3)  # the pooled single R


def test_floor_and_loop_overhead_are_recovered(exact_fit):
    m = exact_fit.model
    assert m.loop_overhead_ns == pytest.approx(LOOP_OVERHEAD_NS, abs=0.5)
    for b in PERIODIC_B:
        assert m.floor_ns([132], [b])[0] == pytest.approx(floor_ns(b), rel=1e-6)
    # isolated volumes past the knee take the trend from below it: the true floor, not the stalled issue time
    assert m.floor_ns([132], [524288])[0] == pytest.approx(floor_ns(524288), rel=1e-3)


@pytest.mark.parametrize("k", [66, 132])
def test_capacity_with_isolated_knee_is_recovered(exact_fit, k):
    c = exact_fit.capacity[k]
    assert c.knee.detector == "body"  # fluid model: every producer stalls, the p90 tail never separates
    assert inside(CAPACITY_BYTES[k], (c.knee.q_lo_bytes, c.knee.q_hi_bytes))
    assert inside(CAPACITY_BYTES[k], c.interval_bytes)
    # the estimate is the centre of what knee and transients cannot tell apart (at K = 132 about 12–16 MiB)
    assert c.q_bytes == pytest.approx(CAPACITY_BYTES[k], rel=0.15)


def test_capacity_from_transients_alone_is_recovered(exact_fit):
    c = exact_fit.capacity[33]  # no isolated launches at K = 33
    assert c.knee is None and c.source.startswith("periodic transients")
    assert inside(CAPACITY_BYTES[33], c.interval_bytes)
    assert inside(CAPACITY_BYTES[33], c.transient_bytes)
    # transients alone pin Q only to the range where the same launches fill up (about 3–5 MiB here)
    assert CAPACITY_BYTES[33] / 1.5 <= c.q_bytes <= CAPACITY_BYTES[33] * 1.5


def test_prediction_of_its_own_sweep_is_exact(exact_fit):
    rec = exact_fit.errors["rec"]
    assert rec["period_err_median_pct"] < 0.05 and rec["period_err_mean_pct"] < 1.0
    assert exact_fit.isolated_errors["vs_median"]["issue_err_median_pct"] < 0.1
    # Eq. 1 + loop overhead misses the launches whose backlog never fills Q (2 KiB bursts at G = 0)
    assert exact_fit.errors["ss"]["period_err_mean_pct"] > 5 * rec["period_err_mean_pct"]


def test_noisy_sweep_keeps_the_model_and_validates_on_the_exact_one():
    fit = fit_calibration(sweep(noise_pct=1.0), store_path="host")
    assert fit.rates.used_by_producers[33] == pytest.approx(90.0, rel=0.03)
    assert fit.rates.used_by_producers[132] == pytest.approx(66.0, rel=0.03)
    for k in (66, 132):
        assert inside(CAPACITY_BYTES[k], fit.capacity[k].interval_bytes)
        assert fit.capacity[k].q_bytes == pytest.approx(CAPACITY_BYTES[k], rel=0.15)
    v = validate(fit, sweep())
    assert v.errors["rec"]["period_err_median_pct"] < 3.0 and v.errors["rec"]["period_err_mean_pct"] < 5.0
    assert v.shared_points == len(v.points)


def test_one_slow_tail_below_the_knee_does_not_move_it(exact_fit):
    pts = sweep()
    slow = (pts["mode"] == "isolated") & (pts["K"] == 132) & (pts["B"] == 24576)  # V = 3.2 MB, far below Q
    pts.loc[slow, "tiss_p90_ns"] *= 3.0
    knee = fit_calibration(pts, store_path="host").capacity[132].knee
    assert (knee.v_lo_bytes, knee.v_hi_bytes) == (exact_fit.capacity[132].knee.v_lo_bytes, exact_fit.capacity[132].knee.v_hi_bytes)


def test_tail_knee_when_only_some_producers_stall():
    """Median producer at the floor, the p90 producer following the law (the H200's pattern): the
    tail detector brackets the true Q."""
    pts = sweep()
    iso = pts["mode"] == "isolated"
    pts.loc[iso, "tiss_med_ns"] = [floor_ns(b) for b in pts.loc[iso, "B"]]
    c = fit_calibration(pts, store_path="host").capacity[132]
    assert c.knee.detector == "tail"
    assert inside(CAPACITY_BYTES[132], (c.knee.q_lo_bytes, c.knee.q_hi_bytes))
    assert inside(CAPACITY_BYTES[132], c.interval_bytes)
