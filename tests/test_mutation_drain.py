"""The host path drain's fit (analysis/drain_fit.py) and its probe reductions (analysis/drain_points.py), docs/model.md
§3 / §11 and docs/calibration-physics.md §1, on small hand-made inputs whose answers are worked out by hand (or by a
few lines of independent numpy) in the comments (docs/mutation.md: written against the mutants test_forward.py's
synthetic-bench tests let through)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.drain_fit import (LOAD_RATE_GRID_GBPS, LoadRoundCase, fit_load_rate, fit_ramp, load_latency_ns,
                                             predict_load_rounds)
from xstage_trace.analysis.drain_points import completion_rate_gbps, load_rounds, ramp_bursts
from xstage_trace.analysis.forward import LinkModel

# ---------------------------------------------------------------- R and Q: the ramp (§3's isolated law, §11.1)


def test_an_exact_line_gives_r_and_q_and_a_burst_at_the_volume_floor_counts():
    # V = R·t + Q with R = 50 B/ns, Q = 1e6 B: t = (V − Q)/R = 140000, 180000, 380000 ns for V = 8e6 (exactly the
    # floor: kept), 10e6, 20e6; a 7.9e6 B burst is left out. Every resample of two or more volumes lies on the line.
    f = fit_ramp([7.9e6, 8e6, 10e6, 20e6], [138000.0, 140000.0, 180000.0, 380000.0])
    assert f.bursts == 3
    assert f.rate_gbps == pytest.approx(50.0, rel=1e-12) and f.capacity_bytes == pytest.approx(1e6, rel=1e-9)
    assert f.rate_interval_gbps == pytest.approx((50.0, 50.0), rel=1e-12)
    assert f.capacity_interval_bytes == pytest.approx((1e6, 1e6), rel=1e-9)


def test_the_line_is_relative_least_squares():
    # three bursts off one line: weights 1/t² on the squared residuals are np.polyfit's w = 1/t (it weights the
    # residuals): R = 47.5, Q = 5285714.29 (independent numpy)
    t, v = np.array([1e5, 2e5, 4e5]), np.array([10e6, 15e6, 24e6])
    r, q = np.polyfit(t, v, 1, w=1.0 / t)
    f = fit_ramp(v, t)
    assert f.rate_gbps == pytest.approx(r, rel=1e-12) and f.capacity_bytes == pytest.approx(q, rel=1e-12)


def test_the_bootstrap_interval_spans_the_pairwise_lines_of_three_volumes():
    # one burst per volume: (t, V) = (1e5, 10e6), (2e5, 15e6), (4e5, 24e6). A resample of the three volumes holds
    # either all three (the full fit, R = 47.5), or two of them (the exact line through those two), or one (no line,
    # dropped): among the 24 of 27 draws with a line, each of the four fits has weight 1/4, so the 5th and 95th
    # percentiles of 200 resamples are the smallest and the largest of them. Pairwise lines by hand:
    #   A–B: R = 5e6/1e5 = 50, Q = 10e6 − 50·1e5 = 5e6;  B–C: R = 9e6/2e5 = 45, Q = 15e6 − 45·2e5 = 6e6;
    #   A–C: R = 14e6/3e5 = 46.67, Q = 10e6 − 46.67·1e5 = 5.33e6; the full fit lies between (Q = 5.29e6)
    f = fit_ramp([10e6, 15e6, 24e6], [1e5, 2e5, 4e5])
    assert f.rate_interval_gbps == pytest.approx((45.0, 50.0), rel=1e-12)
    assert f.capacity_interval_bytes == pytest.approx((5e6, 6e6), rel=1e-12)


def test_the_bootstrap_seed_is_fixed_one_ramp_gives_one_interval():
    # five volumes, two bursts each, 1–3 % off the line V = 50·t + 1e6: the resamples' spread depends on which are
    # drawn, and the seed fixes them
    v = np.repeat([8e6, 12e6, 16e6, 24e6, 32e6], 2)
    t = (v - 1e6) / 50.0 * (1 + 0.01 * np.array([1, -2, 0, 3, -1, 2, 1, -3, 2, 0]))
    assert fit_ramp(v, t) == fit_ramp(v, t)


def test_two_volumes_with_equal_bursts_have_the_full_fit_as_their_interval():
    # two volumes, two bursts each, off one line: a resample holding both volumes holds every burst (the full fit,
    # np.polyfit with w = 1/t), one holding a single volume has no line; so the interval is the full fit itself
    t, v = np.array([2e5, 2.1e5, 4e5, 3.8e5]), np.array([10e6, 10e6, 20e6, 20e6])
    r, q = np.polyfit(t, v, 1, w=1.0 / t)
    f = fit_ramp(v, t)
    assert f.bursts == 4 and f.rate_gbps == pytest.approx(r, rel=1e-12)
    assert f.rate_interval_gbps == pytest.approx((r, r), rel=1e-9)
    assert f.capacity_interval_bytes == pytest.approx((q, q), rel=1e-9)


def test_bursts_close_together_far_from_time_zero_keep_the_line_exact():
    # V = 50·t + 1e6 at t = 1e6, 1e6 + 100, 1e6 + 200, 1e6 + 300 ns: the centred sums give R = 50 to rounding
    # (sums of uncentred terms lose ~1e-8 of it)
    t = 1e6 + 100.0 * np.arange(4)
    f = fit_ramp(50.0 * t + 1e6, t)
    assert f.rate_gbps == pytest.approx(50.0, rel=1e-12)


def test_integer_nanoseconds_past_three_seconds_are_fit_as_floats():
    # t = 4, 5, 6 s in int64 ns: t² is past int64's range, the weights must come from floats; the fit equals
    # np.polyfit's (w = 1/t): R = 0.00987, Q = 1.316e6
    t = np.array([4_000_000_000, 5_000_000_000, 6_000_000_000], dtype=np.int64)
    v = np.array([4.1e7, 5.0e7, 6.1e7])
    r, q = np.polyfit(t.astype(np.float64), v, 1, w=1.0 / t.astype(np.float64))
    f = fit_ramp(v, t)
    assert f.rate_gbps == pytest.approx(r, rel=1e-9) and f.capacity_bytes == pytest.approx(q, rel=1e-6)


def test_a_ramp_of_exactly_two_volumes_fits_and_one_volume_is_refused():
    f = fit_ramp([8e6, 16e6], [1e5, 2e5])  # R = 8e6/1e5 = 80, Q = 8e6 − 80·1e5 = 0
    assert f.rate_gbps == pytest.approx(80.0) and f.capacity_bytes == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="at least two volumes >= 8000000 bytes"):
        fit_ramp([9e6, 9e6, 7e6], [1e5, 1.1e5, 1e5])  # one volume past the floor


# ---------------------------------------------------------------- λ (§11.1)


def test_load_latency_is_the_median_wait_of_rounds_from_one():
    # rounds 0, 1, 2, 3 waiting 900, 5, 7, 30 ns: round 0 (cold) left out; median(5, 7, 30) = 7 (the mean would be 14)
    assert load_latency_ns([900.0, 5.0, 7.0, 30.0], [0, 1, 2, 3]) == 7.0
    assert load_latency_ns(pd.Series([900, 5, 7, 30]), pd.Series([0, 1, 2, 3])) == 7.0


# ---------------------------------------------------------------- the load rounds' forward prediction (§11.2)

# R = 50 B/ns, Q = 2000 B (Q/R = 40 ns), λ = 10 ns, T_iss^0 = 0; 4000-byte stores drain in 80 ns; compute phase X = 100,
# round overhead 20: each round computes X + λ + overhead = 130 ns.
DRAIN = LinkModel(50.0, 2000.0, 10.0, 0.0)


def test_one_cta_loads_when_its_store_is_accepted_by_hand():
    # round 0: store issued at 130, drained 130 + 80 = 210, accepted at max(130, 210 − 40) = 170; the loads are issued
    # at the acceptance (170), wait behind the store until 210 (≥ 170 + λ): compute 200 … 330, a stall of
    # 330 − 170 − 130 = 30 ns; round 1's store drains at 330 + 80 = 410 = the kernel time. Load wait of rounds ≥ 1:
    # 30 + λ = 40 ns. (Issued at the store issue, 130, the loads would stall 70 ns.)
    assert predict_load_rounds(LoadRoundCase(1, 2, 4000.0, 0.0, 100.0, 20.0, 1.0, 1.0), DRAIN) == (410.0, 40.0)


def test_two_ctas_with_a_window_wait_for_the_store_issued_after_their_loads_by_hand():
    # window 300 ns: round 0's two stores at 130 drain at 210 and 290, accepted at 170 and 250. CTA 0's loads (170)
    # wait for both (290): compute 280 … 410 (stall 410 − 170 − 130 = 110), its round-1 store at 410 drains at 490.
    # CTA 1's loads (250) see stores up to 250 + 300 = 550, CTA 0's round-1 store among them: back at 490, compute
    # 480 … 610 (stall 610 − 250 − 130 = 230), drained at 690 = the kernel time. Wait: median(110, 230) + λ = 180 ns.
    # (Without the window both CTAs would compute 280 … 410: kernel 570 ns.)
    model = LinkModel(50.0, 2000.0, 10.0, 0.0, window_ns=300.0)
    case = LoadRoundCase(2, 2, 4000.0, 0.0, 100.0, 20.0, 1.0, 1.0)
    assert predict_load_rounds(case, model) == (690.0, 180.0)
    _, err = fit_load_rate([LoadRoundCase(2, 2, 4000.0, 0.0, 100.0, 20.0, 690.0, 180.0)], model)
    assert all(e == 0.0 for e in err.values())  # the fit keeps the base's window


def test_load_rate_error_is_the_mean_relative_error_over_both_cases_by_hand():
    # Q = 0 (accepted when drained), 1000-byte stores (20 ns), 24000 loaded bytes a round served in d = 24000/rate ns;
    # one CTA, two rounds, each computing W = X + λ + 20: store at W, drained W + 20, loads back at W + 30 + d, round 1
    # stores at 2W + 20 + d: kernel 2W + 40 + d, wait d + λ = 10 + d. X = 100 (W = 130): kernel 300 + d; X = 200: 500 + d.
    # Measured as d = 6 (kernel 306, wait 16) and d = 3 (kernel 503, wait 13); per round 306/2 and 503/2 ns. The error
    # at each rate: mean(|d − 6|/306, |d − 6|/153, |d − 3|/503, |d − 3|/251.5); smallest at d = 6 (4000 GB/s): 9/2012.
    base = LinkModel(50.0, 0.0, 10.0, 0.0)
    cases = [LoadRoundCase(1, 2, 1000.0, 24000.0, 100.0, 20.0, 306.0, 16.0),
             LoadRoundCase(1, 2, 1000.0, 24000.0, 200.0, 20.0, 503.0, 13.0)]
    best, err = fit_load_rate(cases, base)
    for rate in LOAD_RATE_GRID_GBPS:
        d = 24000.0 / rate
        want = np.mean([abs(d - 6) / 306, abs(d - 6) / 153, abs(d - 3) / 503, abs(d - 3) / 251.5])
        assert err[rate] == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert best == 4000.0 and err[4000.0] == pytest.approx(9 / 2012, rel=1e-9)


# ---------------------------------------------------------------- probe reductions (drain_points)

T0 = 1_764_000_000_000_000_001  # epoch ns: float64 is 256 ns apart here, so times must be taken relative first


def _probes(rows: list[tuple]) -> pd.DataFrame:
    """(dump, ns after T0, event, kind, tile, cta) as the decoder gives them (int64 times, categorical names)."""
    p = pd.DataFrame(rows, columns=["dump", "dt", "event", "kind", "tile", "cta"])
    return pd.DataFrame({"dump": pd.Categorical(p["dump"]), "t_gt_ns": (T0 + p["dt"]).astype(np.int64),
                         "event": pd.Categorical(p["event"]), "kind": pd.Categorical(p["kind"]),
                         "tile": p["tile"].astype(np.int64), "cta": p["cta"].astype(np.int64)})


def _burst(dump, tile, begins, ends, dones=()):
    return ([(dump, t, "burst", "begin", tile, c) for c, t in enumerate(begins)]
            + [(dump, t, "burst", "end", tile, c) for c, t in enumerate(ends)]
            + [(dump, t, "done", "mark", tile, c) for c, t in enumerate(dones)])


def test_ramp_bursts_by_hand():
    # dump a (1e7 B), burst 0: begins 100, 130, 110 → spread 30; ends 300, 500, 420 → median 420 − 100 = 320,
    # last 500 − 100 = 400; done marks 350, 600, 450 → 600 − 100 = 500. Burst 1: begins 1000, 1003, 1001 (spread 3),
    # ends 1200, 1310, 1250 → 250 and 310, one done mark 1400 → 400. Dump b (2e7 B): begins 9, 7 → spread 2, ends 500,
    # 700 → median 600 − 7 = 593, last 693, no done mark. A done mark of a burst without records (a's 5) is no burst.
    # Dump c is not in the ramp.
    rows = ([("a", 0, "launch", "mark", 0, 0)] + _burst("a", 0, [100, 130, 110], [300, 500, 420], [350, 600, 450])
            + _burst("a", 1, [1000, 1003, 1001], [1200, 1310, 1250], [1400]) + _burst("a", 5, [], [], [2000])
            + _burst("b", 0, [9, 7], [500, 700]) + _burst("c", 0, [1, 2], [3000, 4000], [5000]))
    got = ramp_bursts(_probes(rows), {"a": 1e7, "b": 2e7})
    want = pd.DataFrame({"dump": ["a", "a", "b"], "burst": [0, 1, 0], "begin_spread_ns": [30.0, 3.0, 2.0],
                         "accept_median_ns": [320.0, 250.0, 593.0], "accept_last_ns": [400.0, 310.0, 693.0],
                         "done_last_ns": [500.0, 400.0, np.nan], "volume_bytes": [1e7, 1e7, 2e7]})
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False, check_index_type=False)
    assert got["volume_bytes"].dtype == np.float64


def test_load_rounds_by_hand():
    # dump l1 starts at 0 (a launch mark): CTA 0 round 0 loads 10 → 60 (wait 50), stores 200 → 230 (accept 30);
    # round 1 loads 300 → 380 (80), stores 500 → 505 (5); CTA 1 round 0 loads 15 → 90 (75; a repeated end at 95: the
    # first counts), stores 220 → 260 (40). Dump l2 is not asked for.
    rows = [("l1", 0, "launch", "mark", 0, 0),
            ("l1", 10, "load", "begin", 0, 0), ("l1", 60, "load", "end", 0, 0),
            ("l1", 200, "burst", "begin", 0, 0), ("l1", 230, "burst", "end", 0, 0),
            ("l1", 300, "load", "begin", 1, 0), ("l1", 380, "load", "end", 1, 0),
            ("l1", 500, "burst", "begin", 1, 0), ("l1", 505, "burst", "end", 1, 0),
            ("l1", 15, "load", "begin", 0, 1), ("l1", 90, "load", "end", 0, 1), ("l1", 95, "load", "end", 0, 1),
            ("l1", 220, "burst", "begin", 0, 1), ("l1", 260, "burst", "end", 0, 1),
            ("l2", 5, "load", "begin", 0, 0), ("l2", 7, "load", "end", 0, 0)]
    got = load_rounds(_probes(rows), {"l1"})
    want = pd.DataFrame({"dump": ["l1", "l1", "l1"], "cta": [0, 0, 1], "round": [0, 1, 0],
                         "load_begin_ns": [10.0, 300.0, 15.0], "load_wait_ns": [50.0, 80.0, 75.0],
                         "store_begin_ns": [200.0, 500.0, 220.0], "store_accept_ns": [30.0, 5.0, 40.0]})
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False, check_index_type=False,
                                  check_names=False)


def test_completion_rate_is_the_slope_over_the_middle_half_by_hand():
    # acceptances every 10 ns of 1000, 1000, 100, 100, 100, 100, 5000, 5000 bytes: cumulative 1000, 2000, 2100, 2200,
    # 2300, 2400, 7400, 12400. The middle half (points 2 … 5) rises 100 bytes per 10 ns: 10 GB/s. Over the first half
    # (points 0 … 3: t = 0, 10, 20, 30, cum 1000 … 2200): Σ(t − 15)(c − 1825) / Σ(t − 15)² = 18500 / 500 = 37.
    t = np.arange(8) * 10.0
    b = np.array([1000, 1000, 100, 100, 100, 100, 5000, 5000], dtype=np.int64)
    shuffle = np.array([5, 2, 7, 0, 3, 6, 1, 4])  # any order: pooled in time order
    assert completion_rate_gbps(t[shuffle], b[shuffle]) == pytest.approx(10.0, rel=1e-12)
    assert completion_rate_gbps(t[shuffle], b[shuffle], middle=(0.0, 0.5)) == pytest.approx(37.0, rel=1e-12)


def test_completion_rate_keeps_tied_acceptances_in_their_input_order():
    # 64 acceptances in tied pairs (10 ns apart) of 1000 and 3000 bytes, shuffled: the cumulative bytes at a tie depend
    # on which is counted first; a stable time order (Python's sorted, independent of numpy) keeps the input's
    t = (np.repeat(np.arange(32), 2) * 10.0)[(np.arange(64) * 37) % 64]
    b = np.tile([1000.0, 3000.0], 32)[(np.arange(64) * 37) % 64]
    o = np.array(sorted(range(64), key=t.__getitem__))
    want = np.polyfit(t[o][16:48], np.cumsum(b[o])[16:48], 1)[0]  # the middle half: points 16 … 47
    assert completion_rate_gbps(t, b) == pytest.approx(want, rel=1e-12)
