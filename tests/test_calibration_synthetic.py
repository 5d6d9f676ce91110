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


def periodic_launch(k, b, g, r=None, t0=None):
    v, q_cap = k * b, CAPACITY_BYTES[k]
    r = RATE_GBPS[k] if r is None else r
    t0 = floor_ns(b) if t0 is None else t0
    q, issue, period = 0.0, [], []
    for _ in range(64):
        t = max(t0, (q + v - q_cap) / r)
        q = max(q + v - r * (t + g + LOOP_OVERHEAD_NS), 0.0)
        issue.append(t)
        period.append(t + g + LOOP_OVERHEAD_NS)
    return float(np.median(issue[16:64])), float(np.median(period[16:63]))


def isolated_burst(k, b, r=None, t0=None):
    v, q_cap = k * b, CAPACITY_BYTES[k]
    r = RATE_GBPS[k] if r is None else r
    t0 = floor_ns(b) if t0 is None else t0
    return t0 if v - r * t0 <= q_cap else max(t0, (v - q_cap) / r)


def sweep(noise_pct=0.0, seed=1, rate_of=None, floor_offset_ns=0.0, periodic_b=PERIODIC_B):
    """The sweep; rate_of(K, B) replaces R(K) (a drain rate that also moves with B), floor_offset_ns
    is added to every T_iss^0 (a bench with a larger per-burst fixed cost)."""
    rng = np.random.default_rng(seed)
    rate_of = rate_of or (lambda k, b: RATE_GBPS[k])
    rows = []
    for k in (33, 66, 132):
        for b in periodic_b:
            for g in GAPS_NS:
                t, p = periodic_launch(k, b, g, rate_of(k, b), floor_ns(b) + floor_offset_ns)
                rows.append(("periodic", k, b, g, t, t, p))
    for k in (66, 132):
        for b in ISOLATED_B:
            t = isolated_burst(k, b, rate_of(k, b), floor_ns(b) + floor_offset_ns)
            gap = 10 * k * b / rate_of(k, b) + 30000  # gap ≫ V/R: every burst starts recovered
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


# R(K, B): at K = 132 the drain slows with the burst size (on the H200 host path 67 → 59 GB/s from
# 8 to 128 KiB per producer), K = 33 and 66 keep one rate per K.
RATE_132_BY_B = {2048: 70.0, 8192: 70.0, 32768: 66.0, 131072: 58.0}


def rate_by_configuration(k, b):
    return RATE_132_BY_B[b] if k == 132 and b in RATE_132_BY_B else RATE_GBPS[k]


@pytest.fixture(scope="module")
def configuration_fit():
    return fit_calibration(sweep(rate_of=rate_by_configuration), store_path="host")


def test_synthetic_rate_per_configuration_is_recovered(configuration_fit):
    conf = configuration_fit.rates.by_configuration
    for b in (8192, 32768, 131072):  # drain-limited at G = 0 (2 KiB bursts never are: the launch fits in Q)
        assert conf[(132, b)]["rate_gbps"] == pytest.approx(RATE_132_BY_B[b], rel=1e-3)
        assert conf[(132, b)]["points"] >= 2  # every drain-limited gap, not only G = 0
    for k in (33, 66):
        for b in (32768, 131072):
            assert conf[(k, b)]["rate_gbps"] == pytest.approx(RATE_GBPS[k], rel=1e-3)
    m = configuration_fit.model
    # between measured B: log-linear, 16 KiB is the log-midpoint of 8 and 32 KiB; outside: the nearest end
    assert m.rate([132], [16384])[0] == pytest.approx((70.0 + 66.0) / 2, rel=1e-3)
    assert m.rate([132], [524288])[0] == pytest.approx(58.0, rel=1e-3)
    assert m.rate([132])[0] == pytest.approx(configuration_fit.rates.used_by_producers[132])  # no B: R(K)


def test_synthetic_rate_per_configuration_predicts_its_sweep(configuration_fit):
    rec = configuration_fit.errors["rec"]
    assert rec["period_err_median_pct"] < 0.05 and rec["period_err_mean_pct"] < 1.0
    # a single R(K = 132) would miss the 128 KiB launches by |58/R(K) − 1| (R(K) is the median over 8–128 KiB)
    one_rate = 100 * abs(58.0 / configuration_fit.rates.used_by_producers[132] - 1)
    drain = configuration_fit.points[(configuration_fit.points["K"] == 132) & (configuration_fit.points["B"] == 131072)
                                     & (configuration_fit.points["regime"] == "drain_limited")]
    assert one_rate > 5 and (drain["period_err_rec_pct"] < 0.5).all()


@pytest.fixture(scope="module")
def other_run():
    """A second synthetic run: every drain rate 5 % lower and 100 ns more per-burst fixed cost in T_iss^0."""
    return sweep(rate_of=lambda k, b: rate_by_configuration(k, b) / 1.05, floor_offset_ns=100.0)


def test_synthetic_measured_difference_is_recovered(configuration_fit, other_run):
    d = validate(configuration_fit, other_run).measured_difference
    assert d["shared_points"] == len(PERIODIC_B) * len(GAPS_NS) * 3
    f = d["floor_offset_ns"]
    assert f["median"] == pytest.approx(100.0, abs=1e-6) and f["min"] == pytest.approx(100.0, abs=1e-6)
    assert d["issue_floor_offset_ns"]["median"] == pytest.approx(100.0, abs=1e-6)
    r = d["drain_rate_ratio"]
    assert r["median"] == pytest.approx(1.05, rel=1e-3)
    # by hand: predicted V/R_A against measured V/R_B = 1.05·V/R_A → |1/1.05 − 1| = 4.76 %
    assert r["period_err_bound_median_pct"] == pytest.approx(100 * (1 - 1 / 1.05), abs=0.05)
    for c in d["rate_ratio_by_configuration"].values():
        assert c["ratio"] == pytest.approx(1.05, rel=1e-3)


def test_synthetic_cross_run_error_is_the_measured_difference(configuration_fit, other_run):
    """No refit: drain-limited launches are off by the rate ratio, recovered ones by 100 ns over their period."""
    v = validate(configuration_fit, other_run)
    p = v.points
    drain = p[p["regime"] == "drain_limited"]
    # clearly drain-limited in both runs (V/R ≥ 1.5·(T_iss^0 + G + o)): steady period V/R_B, predicted V/R_A
    steady = drain[drain["V"] / drain["rate_gbps"] >= 1.5 * (drain["issue_floor_ns"] + drain["gap_ns"] + LOOP_OVERHEAD_NS)]
    assert len(steady) >= 30
    assert np.allclose(steady["period_err_rec_pct"], 100 * (1 - 1 / 1.05), atol=0.05)
    floor = p[(p["regime"] == "floor") & (p["gap_ns"] >= 8000)]
    floor = floor[np.isclose(floor["tiss_med_ns"], floor["issue_floor_ns"] + 100.0)]  # at its floor in the other run too
    assert len(floor) >= 20
    hand = 100 * 100.0 / floor["period_med_ns"]  # T_iss^0 + G + o predicted 100 ns short
    assert np.allclose(floor["period_err_rec_pct"], hand, rtol=1e-6)


def test_synthetic_new_sweep_validates_against_old_through_the_cli(tmp_path, configuration_fit, other_run):
    """What the lead runs after a fresh sweep: calibrate fit NEW.csv --validate OLD.csv."""
    import json
    import subprocess
    import sys

    new, old, out = tmp_path / "new.csv", tmp_path / "old.csv", tmp_path / "calib.json"
    sweep(rate_of=rate_by_configuration).to_csv(new, index=False)
    other_run.to_csv(old, index=False)
    r = subprocess.run([sys.executable, "-m", "xstage_trace", "calibrate", "fit", str(new), "--validate", str(old), "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["calibration_version"] == 5
    assert d["rate_by_configuration_gbps"]["132,131072"] == pytest.approx(58.0, rel=1e-3)
    md = d["validation"]["measured_difference"]
    assert md["floor_offset_ns"]["median"] == pytest.approx(100.0, abs=1e-6)
    assert md["drain_rate_ratio"]["median"] == pytest.approx(1.05, rel=1e-3)
    assert "measured difference" in " ".join(r.stdout.split())
