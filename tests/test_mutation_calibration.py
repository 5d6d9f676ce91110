"""The calibration fit (analysis/calibration_fit.py, docs/model.md §3) on a sweep small enough to fit
by hand: every number asserted below is worked out in the comments from the rules of the module
docstring (docs/mutation.md: no planted bug in the fit was caught before these tests)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.calibration_fit import (CalibratedPlatform, fit_calibration, predict, predict_isolated, rates_of,
                                                   recurrence_medians, store_of)
from xstage_trace.analysis.platform import PlatformModel


def _pt(K, B, G, tiss, period, mode="periodic", dest="host", store=None, p90=None):
    row = {"dest": dest, "mode": mode, "K": K, "B": B, "V": K * B, "gap_ns": float(G), "tiss_med_ns": float(tiss),
           "tiss_p90_ns": float(tiss if p90 is None else p90), "period_med_ns": float(period)}
    if store is not None:
        row["store"] = store
    return row


# K = 4, B = 1000 (V = 4000 B): drains at 2 GB/s (V/R = 2000 ns), floor ~105 ns, loop overhead ~50 ns.
# K = 8, B = 1000 (V = 8000 B): drains at 5 GB/s (V/R = 1600 ns), floor 200 ns.
HAND = [
    _pt(4, 1000, 0, 1950, 2000), _pt(4, 1000, 500, 1450, 2000), _pt(4, 1000, 1000, 950, 2500),   # drain-limited: 2.0, 2.0, 1.6 GB/s
    _pt(4, 1000, 3000, 100, 3150), _pt(4, 1000, 6000, 105, 6155), _pt(4, 1000, 12000, 108, 12160),  # recovered (G ≥ 1.5·V/R = 3000)
    _pt(4, 1000, 2000, 112, 2162),  # within 12 % of the floor but not recovered by construction (G < 3000): no floor vote
    _pt(8, 1000, 0, 1550, 1600), _pt(8, 1000, 500, 1050, 1600),  # drain-limited: 5.0, 5.0 GB/s
    _pt(8, 1000, 3000, 200, 3250), _pt(8, 1000, 6000, 200, 6250),  # recovered (G ≥ 1.5·1600 = 2400)
]


@pytest.fixture  # per test, so that mutation testing attributes the fit to every test that reads it
def hand_fit():
    return fit_calibration(pd.DataFrame(HAND))


def test_drain_rates_by_hand(hand_fit):
    r = hand_fit.rates
    # drain-limited: median issue ≥ 2 × floor (K=4: 2 × 105 = 210; K=8: 400): the 3 + 2 launches above
    assert r.points == hand_fit.rate_points == 5
    # pooled: median of [1.6, 2, 2, 5, 5] = 2; numpy percentiles 25 / 75 % = 2 and 5: half-IQR 1.5
    assert r.rate_gbps == pytest.approx(2.0) and r.uncertainty_gbps == pytest.approx(1.5)
    # K=4: median 2.0, half-IQR of [1.6, 2, 2] = (2 − 1.8)/2 = 0.1; |2 − 2| ≤ max(0.1, 1.5): uses the pooled R
    assert r.measured_by_producers[4] == {"rate_gbps": pytest.approx(2.0), "uncertainty_gbps": pytest.approx(0.1), "points": 3, "differs": False}
    # K=8: median 5.0, |5 − 2| = 3 > 1.5: differs, R(8) = 5
    assert r.measured_by_producers[8] == {"rate_gbps": pytest.approx(5.0), "uncertainty_gbps": pytest.approx(0.0), "points": 2, "differs": True}
    assert r.used_by_producers == {4: pytest.approx(2.0), 8: pytest.approx(5.0)}
    assert r.by_configuration[(4, 1000)]["rate_gbps"] == pytest.approx(2.0) and r.by_configuration[(4, 1000)]["points"] == 3
    assert r.by_configuration[(8, 1000)]["rate_gbps"] == pytest.approx(5.0)
    assert hand_fit.model.rate_by_producers_gbps == {4: pytest.approx(2.0), 8: pytest.approx(5.0)}
    assert hand_fit.model.rate_gbps == pytest.approx(2.0)  # the model's single R is the pooled one


def test_issue_floor_and_loop_overhead_by_hand(hand_fit):
    m = hand_fit.model
    # K=4 recovered launches 100, 105, 108 (all within 10 % of 100): median 105; the 112 ns launch is not recovered
    assert m.issue_floor_ns[(4, 1000)] == pytest.approx(105.0)
    assert m.issue_floor_ns[(8, 1000)] == pytest.approx(200.0)
    # o = median of period − G − T_iss^0 over recovered launches with G > 0:
    # K=4: 3150−3000−105 = 45, 6155−6000−105 = 50, 12160−12000−105 = 55; K=8: 50, 50 -> 50
    assert m.loop_overhead_ns == pytest.approx(50.0)


def test_predictions_by_hand(hand_fit):
    p = hand_fit.points.set_index(["K", "gap_ns"])
    # K=4 uses R(4, 1000) = 2 GB/s: V/R = 2000 ns
    assert p.loc[(4, 0.0), "pred_period_ss_ns"] == pytest.approx(2000.0)  # max(105 + 0 + 50, 2000)
    assert p.loc[(4, 0.0), "pred_issue_ss_ns"] == pytest.approx(1950.0)  # max(105, 2000 − 0 − 50)
    assert p.loc[(4, 0.0), "regime"] in ("drain_limited", "capacity")
    assert p.loc[(4, 1000.0), "period_err_ss_pct"] == pytest.approx(20.0)  # |2000 − 2500| / 2500
    assert p.loc[(4, 1000.0), "issue_err_ss_pct"] == pytest.approx(0.0)  # max(105, 2000 − 1000 − 50) = 950
    assert p.loc[(4, 3000.0), "pred_period_ss_ns"] == pytest.approx(3155.0) and p.loc[(4, 3000.0), "pred_issue_ss_ns"] == pytest.approx(105.0)
    assert p.loc[(4, 12000.0), "period_err_ss_pct"] == pytest.approx(100 * 5 / 12160)  # 12155 vs 12160
    assert p.loc[(8, 500.0), "pred_issue_ss_ns"] == pytest.approx(1050.0)  # R(8) = 5: 1600 − 500 − 50
    assert p.loc[(8, 6000.0), "pred_period_ss_ns"] == pytest.approx(6250.0)
    e = hand_fit.errors["ss"]
    errs = p["period_err_ss_pct"].to_numpy()
    assert e["period_err_median_pct"] == pytest.approx(np.median(errs)) and e["period_err_mean_pct"] == pytest.approx(errs.mean())
    assert set(e["by_producers"]) == {4, 8}
    assert [u["gap_ns"] for u in e["unexplained"]] == [1000.0]  # the only launch more than 10 % off


def test_regimes_by_hand():
    model = PlatformModel(2.0, {(4, 1000): 100.0}, None, 50.0)
    pts = pd.DataFrame([_pt(4, 1000, 0, 1950, 2000), _pt(4, 1000, 1850, 100, 2000), _pt(4, 1000, 1851, 100, 2001)])
    p = predict(pts, model)
    # drain_limited where V/R = 2000 ≥ T0 + G + o: G = 0 and G = 1850 (100 + 1850 + 50 = 2000, the boundary), floor beyond
    assert p["regime"].tolist() == ["drain_limited", "drain_limited", "floor"]
    assert p["pred_period_ss_ns"].tolist() == pytest.approx([2000.0, 2000.0, 2001.0])
    assert "pred_period_rec_ns" not in p  # no capacity: no recurrence


def test_recurrence_medians_by_hand():
    """V = 4000 B, R = 2 GB/s, T0 = 100, G = 0, o = 50, Q = 1 B: each burst issues (q + V − Q)/R = 1999.5 ns
    (q stays 0: 4000 − 2·(1999.5 + 50) < 0), period 2049.5 ns. With Q = 1 GiB nothing stretches: 100 and 150."""
    per, iss = recurrence_medians(np.array([4000.0, 4000.0]), np.array([0.0, 0.0]), np.array([100.0, 100.0]), np.array([2.0, 2.0]),
                                  np.array([1.0, 2.0**30]), 50.0, np.array([64, 64]))
    assert iss.tolist() == pytest.approx([1999.5, 100.0]) and per.tolist() == pytest.approx([2049.5, 150.0])


def test_recurrence_medians_skip_the_warmup():
    """Q = 3000 B, V = 4000 B, R = 2, T0 = 100, G = 0, o = 0: burst 0 issues (0 + 4000 − 3000)/2 = 500 ns and
    leaves 4000 − 2·500 = 3000 B; from then on (3000 + 1000)/2 = 2000 ns and the backlog stays 3000 B.
    With warm-up 0 the median over bursts 0..62 is still 2000 (one short burst of 63); warm-up 62 keeps one."""
    args = (np.array([4000.0]), np.array([0.0]), np.array([100.0]), np.array([2.0]), np.array([3000.0]), 0.0)
    per, iss = recurrence_medians(*args, np.array([3]), warmup=0)  # bursts 0, 1 used (the last one has no period)
    assert iss.tolist() == pytest.approx([(500.0 + 2000.0) / 2])
    per, iss = recurrence_medians(*args, np.array([3]), warmup=1)
    assert iss.tolist() == pytest.approx([2000.0]) and per.tolist() == pytest.approx([2000.0])


def test_isolated_law_by_hand():
    model = PlatformModel(2.0, {(4, 1000): 105.0, (4, 100): 20.0}, {4: 1000.0}, 0.0)
    pts = pd.DataFrame([_pt(4, 1000, 0, 1600, 0, mode="isolated", p90=2000), _pt(4, 100, 0, 25, 0, mode="isolated")])
    p = predict_isolated(pts, model)
    # V = 4000: excess 4000 − 2·105 = 3790 > Q = 1000: max(105, (4000 − 1000)/2) = 1500; V = 400: 400 − 40 ≤ Q: the floor 20
    assert p["pred_issue_iso_ns"].tolist() == pytest.approx([1500.0, 20.0])
    assert p["iso_err_med_pct"].tolist() == pytest.approx([100 * 100 / 1600, 100 * 5 / 25])
    assert p["iso_err_p90_pct"].tolist()[0] == pytest.approx(100 * 500 / 2000)
    assert predict_isolated(pts, PlatformModel(2.0, {(4, 1000): 105.0, (4, 100): 20.0})).empty  # no Q: no law


def test_rate_interpolation_by_hand():
    m = CalibratedPlatform(3.0, {(4, 1000): 1.0}, None, 0.0, "", "", {4: 2.0, 8: 5.0}, {(4, 1000): 2.0, (4, 4000): 4.0, (8, 1000): 6.0})
    assert m.rate([4, 5, 7, 8]).tolist() == [2.0, 2.0, 5.0, 5.0]  # R(K) of the nearest K
    assert m.rate([6]).tolist() == [2.0]  # a tie takes the smaller K
    # log-linear in B: B = 2000 is half way between 1000 and 4000 in log: 2 + (4 − 2)/2 = 3; ends held outside
    assert m.rate([4, 4, 4, 4], [1000, 2000, 4000, 16000]).tolist() == pytest.approx([2.0, 3.0, 4.0, 4.0])
    assert m.rate([4], [250]).tolist() == pytest.approx([2.0])
    assert m.rate([8, 7], [4000, 1000]).tolist() == pytest.approx([6.0, 6.0])
    assert CalibratedPlatform(3.0, {(4, 1000): 1.0}).rate([4, 8], [1000, 1000]).tolist() == [3.0, 3.0]  # nothing per K: pooled
    assert rates_of(m, [4], [2000]).tolist() == pytest.approx([3.0])
    assert rates_of(PlatformModel(7.0, {(4, 1000): 1.0}), [4, 8]).tolist() == [7.0, 7.0]


def test_floor_interpolation_by_hand():
    m = PlatformModel(1.0, {(4, 1000): 100.0, (4, 4000): 300.0, (8, 1000): 50.0})
    # log-linear between 1000 and 4000 (2000: half way), proportional to B outside (500: 50; 8000: 600)
    assert m.floor_ns([4, 4, 4, 4], [1000, 2000, 500, 8000]).tolist() == pytest.approx([100.0, 200.0, 50.0, 600.0])
    assert m.floor_ns([7, 9], [1000, 2000]).tolist() == pytest.approx([50.0, 100.0])
    assert PlatformModel(1.0, {}, {4: 10.0, 8: 20.0}).capacity([3, 6, 7]).tolist() == [10.0, 10.0, 20.0]
    assert PlatformModel(1.0, {}, {4: 10.0, 8: 20.0}).capacity_bytes == 20.0
    with pytest.raises(ValueError):
        PlatformModel(1.0, {}).floor_ns([4], [1000])


def test_store_path_and_instruction_selection():
    rows = [dict(r, store="stg") for r in HAND] + [dict(r, store="bulk", period_med_ns=r["period_med_ns"] * 2) for r in HAND]
    pts = pd.DataFrame(rows)
    with pytest.raises(ValueError, match="several store instructions"):
        fit_calibration(pts)
    assert fit_calibration(pts, store="stg").rates.rate_gbps == pytest.approx(2.0)
    bulk = fit_calibration(pts, store="bulk")
    assert bulk.store == "bulk" and bulk.rates.rate_gbps == pytest.approx(1.0)  # every period doubled: half the rate
    both = pd.concat([pd.DataFrame(HAND), pd.DataFrame(HAND).assign(dest="peer")])
    with pytest.raises(ValueError, match="several store paths"):
        fit_calibration(both)
    assert fit_calibration(both, store_path="peer").model.store_path == "peer"
    assert store_of(pd.DataFrame({"store": ["bulk", None, np.nan]})).tolist() == ["bulk", "stg", "stg"]
    assert store_of(pd.DataFrame({"K": [1, 2]})).tolist() == ["stg", "stg"]


def test_a_sweep_never_drain_limited_gives_a_lower_bound():
    """Only recovered launches: no R can be fitted; R ≥ the largest V / T_period at G = 0 (4000 / 160 = 25)."""
    pts = pd.DataFrame([_pt(4, 1000, 0, 100, 160), _pt(4, 1000, 0, 120, 200), _pt(4, 1000, 5000, 104, 5150)])
    fit = fit_calibration(pts)
    assert fit.rates is None and fit.rate_points == 0
    assert fit.model.rate_gbps == pytest.approx(25.0)
    assert fit.capacity_reason.startswith("no drain-limited periodic launch: R >= 25 GB/s")
    assert fit.model.issue_floor_ns[(4, 1000)] == pytest.approx(102.0)  # 100 and 104 within 10 % of 100 (120 is not): median 102
    # o over the launches recovered at the lower-bound rate (G ≥ 1.5·4000/25 = 240): 5150 − 5000 − 102 = 48
    assert fit.model.loop_overhead_ns == pytest.approx(48.0)



def test_a_sweep_without_recovered_launches_is_refused():
    """HAND's drain-limited launches only (G < 1.5·V/R for each): R(4) = 2 and R(8) = 5 GB/s are found, but no
    launch recovered between bursts, so no issue floor: UnrecoveredSweep naming the store path and instruction."""
    from xstage_trace.analysis.calibration_fit import UnrecoveredSweep

    limited = [p for p in HAND if p["gap_ns"] <= 1000]
    with pytest.raises(UnrecoveredSweep, match=r"^the host/stg points hold no recovered launch"):
        fit_calibration(pd.DataFrame(limited))
    assert fit_calibration(pd.DataFrame(limited + HAND[3:4])).model.issue_floor_ns == {(4, 1000): 100.0}  # one recovered: fitted

# A hand model for validate(): R(K, B) = 2 GB/s (R(K) and the pooled R are 3, so using them shows), T_iss^0 = 100 ns
# at (4, 1000) and (8, 1000), 20 ns at (4, 100), o = 50 ns, Q(4) = 1 B, Q(8) = 1 GiB.
VAL_MODEL = CalibratedPlatform(3.0, {(4, 1000): 100.0, (4, 100): 20.0, (8, 1000): 100.0}, {4: 1.0, 8: float(2**30)}, 50.0, "H200", "host",
                               {4: 3.0, 8: 3.0}, {(4, 1000): 2.0, (4, 100): 2.0, (8, 1000): 2.0})
VAL_POINTS = [
    # A: V = 4000, G = 0: Eq. 1 + o: period max(100 + 0 + 50, 2000) = 2000, issue max(100, 2000 − 50) = 1950; the
    # recurrence with Q = 1 B (test_recurrence_medians_by_hand): issue 1999.5, period 2049.5, 2.5 % off Eq. 1: "capacity"
    _pt(4, 1000, 0, 2000, 2500),
    # B: V = 8000, G = 10000: period max(100 + 10000 + 50, 4000) = 10150, issue max(100, 4000 − 10050) = 100; with
    # Q = 1 GiB the recurrence never stalls: issue 100, period 10150, as Eq. 1: "floor" (4000 < 10150)
    _pt(8, 1000, 10000, 125, 10000),
    # isolated: I1 V = 4000: excess 4000 − 2·100 > Q = 1: max(100, 3999/2) = 1999.5 (beyond Q); I2 V = 400:
    # 400 − 40 > 1: max(20, 399/2) = 199.5 (beyond Q); I3 V = 8000: 8000 − 200 < 1 GiB: the floor 100 (within Q)
    _pt(4, 1000, 0, 1600, 0, mode="isolated", p90=2000), _pt(4, 100, 0, 200, 0, mode="isolated", p90=250),
    _pt(8, 1000, 0, 125, 0, mode="isolated", p90=200),
]


def _val_fit():
    """A fit of only point A (its own predictions), to validate VAL_POINTS against."""
    from xstage_trace.analysis.calibration_fit import CalibrationFit

    own = predict(pd.DataFrame(VAL_POINTS[:1]), VAL_MODEL)
    return CalibrationFit(VAL_MODEL, None, {}, None, own, own.iloc[0:0])


def test_validate_predicts_every_column_by_hand():
    from xstage_trace.analysis.calibration_fit import validate

    other = pd.DataFrame(VAL_POINTS + [dict(VAL_POINTS[0], dest="peer"), dict(VAL_POINTS[1], store="bulk")])  # two left out
    v = validate(_val_fit(), other)
    p = v.points
    assert list(p.columns[: len(other.columns)]) == list(other.columns) and p.index.tolist() == [0, 1]
    assert p["K"].tolist() == [4, 8]
    assert p["issue_floor_ns"].tolist() == [100.0, 100.0] and p["rate_gbps"].tolist() == [2.0, 2.0]
    assert p["pred_period_ss_ns"].tolist() == pytest.approx([2000.0, 10150.0])
    assert p["pred_issue_ss_ns"].tolist() == pytest.approx([1950.0, 100.0])
    assert p["pred_period_rec_ns"].tolist() == pytest.approx([2049.5, 10150.0])
    assert p["pred_issue_rec_ns"].tolist() == pytest.approx([1999.5, 100.0])
    assert p["regime"].tolist() == ["capacity", "floor"]
    # % errors: A: |2000 − 2500|/2500 = 20, |1950 − 2000|/2000 = 2.5, |2049.5 − 2500|/2500 = 18.02, 0.5/2000 = 0.025;
    # B: 150/10000 = 1.5, 25/125 = 20 (both lines)
    assert p["period_err_ss_pct"].tolist() == pytest.approx([20.0, 1.5]) and p["issue_err_ss_pct"].tolist() == pytest.approx([2.5, 20.0])
    assert p["period_err_rec_pct"].tolist() == pytest.approx([18.02, 1.5]) and p["issue_err_rec_pct"].tolist() == pytest.approx([0.025, 20.0])
    ss, rec = v.errors["ss"], v.errors["rec"]
    assert ss["period_err_median_pct"] == pytest.approx(10.75) and ss["period_err_mean_pct"] == pytest.approx(10.75)
    assert ss["issue_err_median_pct"] == pytest.approx(11.25) and ss["issue_err_mean_pct"] == pytest.approx(11.25)
    assert rec["period_err_median_pct"] == pytest.approx(9.76) and rec["issue_err_mean_pct"] == pytest.approx(10.0125)
    assert ss["by_producers"] == {4: {"period_err_median_pct": pytest.approx(20.0), "period_err_mean_pct": pytest.approx(20.0),
                                      "issue_err_median_pct": pytest.approx(2.5), "issue_err_mean_pct": pytest.approx(2.5)},
                                  8: {"period_err_median_pct": pytest.approx(1.5), "period_err_mean_pct": pytest.approx(1.5),
                                      "issue_err_median_pct": pytest.approx(20.0), "issue_err_mean_pct": pytest.approx(20.0)}}
    assert ss["by_regime"]["capacity"] == {"period_err_median_pct": pytest.approx(20.0), "period_err_mean_pct": pytest.approx(20.0),
                                           "issue_err_median_pct": pytest.approx(2.5), "issue_err_mean_pct": pytest.approx(2.5), "points": 1}
    assert set(ss["by_regime"]) == {"capacity", "floor"} and rec["by_regime"]["floor"]["points"] == 1
    # more than 10 % off: A on both lines
    assert ss["unexplained"] == [{"K": 4, "B": 1000, "gap_ns": 0.0, "period_med_ns": 2500.0, "period_err_ss_pct": pytest.approx(20.0)}]
    assert rec["unexplained"] == [{"K": 4, "B": 1000, "gap_ns": 0.0, "period_med_ns": 2500.0, "period_err_rec_pct": pytest.approx(18.02)}]
    # the fit measured only A's (K, B, G): one shared point, its errors alone
    assert v.shared_points == 1 and v.errors_shared["ss"]["period_err_mean_pct"] == pytest.approx(20.0)
    assert v.measured_difference["shared_points"] == 1


def test_validate_scores_the_isolated_law_by_hand():
    from xstage_trace.analysis.calibration_fit import validate

    v = validate(_val_fit(), pd.DataFrame(VAL_POINTS))
    i = v.isolated
    assert i["issue_floor_ns"].tolist() == [100.0, 20.0, 100.0] and i["pred_issue_iso_ns"].tolist() == pytest.approx([1999.5, 199.5, 100.0])
    # vs the median: |1999.5 − 1600|/1600 = 24.96875, 0.5/200 = 0.25, 25/125 = 20; vs p90: 0.5/2000 = 0.025, 50.5/250 = 20.2, 100/200 = 50
    med, p90 = [24.96875, 0.25, 20.0], [0.025, 20.2, 50.0]
    assert i["iso_err_med_pct"].tolist() == pytest.approx(med) and i["iso_err_p90_pct"].tolist() == pytest.approx(p90)
    e = v.isolated_errors
    assert (e["points"], e["points_beyond_q"]) == (3, 2)

    def part(x):
        return {"issue_err_median_pct": pytest.approx(float(np.median(x))), "issue_err_mean_pct": pytest.approx(float(np.mean(x)))}

    for name, errs in (("vs_median", med), ("vs_p90", p90)):
        assert e[name] == dict(part(errs), within_q=part(errs[2:]), beyond_q=part(errs[:2]), by_producers={4: part(errs[:2]), 8: part(errs[2:])})
    only_within = validate(_val_fit(), pd.DataFrame(VAL_POINTS[4:])).isolated_errors  # no periodic point (crashed before)
    assert only_within["points_beyond_q"] == 0 and only_within["vs_median"]["beyond_q"] is None
    assert only_within["vs_median"]["within_q"] == part([20.0])


def test_the_fit_carries_the_platform_store_path_and_store():
    fit = fit_calibration(pd.DataFrame(HAND), platform="H200")
    assert (fit.model.platform, fit.model.store_path, fit.store) == ("H200", "host", "stg")
    assert fit.points.index.tolist() == list(range(len(HAND))) and "index" not in fit.points
    lower = fit_calibration(pd.DataFrame([_pt(4, 1000, 0, 100, 160), _pt(4, 1000, 5000, 104, 5150)]), platform="H200")
    assert (lower.model.platform, lower.model.store_path, lower.store) == ("H200", "host", "stg")
    assert lower.capacity == {} and lower.isolated.empty and set(lower.errors) == {"ss"}


def test_recurrence_medians_of_no_launch_are_empty():
    per, iss = recurrence_medians(np.array([]), np.array([]), np.array([]), np.array([]), np.array([]), 50.0, np.array([], dtype=int))
    assert per.size == 0 and iss.size == 0


def test_isolated_launches_join_the_floors_and_are_scored_by_the_law():
    """HAND plus isolated launches at (4, 1000), 105 ns, and (4, 250), 30 ns. Floors: (4, 250) has only its own
    launch, 30; (4, 1000): recovered 100, 105, 108 and the isolated 105, all within 10 % of 100: median 105. Q(4)
    is fitted from the transients (whatever it is, above the excesses 4000 − 2·105 = 3790 and 1000 − 2·30 = 940
    the law then predicts the floors): both launches are predicted exactly."""
    iso = [_pt(4, 1000, 0, 105, 0, mode="isolated"), _pt(4, 250, 0, 30, 0, mode="isolated")]
    fit = fit_calibration(pd.DataFrame(HAND + iso))
    assert fit.model.issue_floor_ns[(4, 250)] == pytest.approx(30.0) and fit.model.issue_floor_ns[(4, 1000)] == pytest.approx(105.0)
    assert fit.model.capacity([4])[0] > 3790
    assert fit.isolated["B"].tolist() == [1000, 250] and fit.isolated["pred_issue_iso_ns"].tolist() == pytest.approx([105.0, 30.0])
    assert (fit.isolated_errors["points"], fit.isolated_errors["points_beyond_q"]) == (2, 0)
    assert len(fit.points) == len(HAND) and set(fit.points["mode"]) == {"periodic"}


def test_a_floor_vote_needs_a_launch_recovered_by_construction():
    """HAND plus a K=4 launch at G = 2000 < 1.5·V/R = 3000 issuing in 109 ns, within 10 % of the 100 ns floor: it is
    not recovered by construction, so T_iss^0(4, 1000) stays the median of 100, 105, 108 = 105 (not 106.5)."""
    fit = fit_calibration(pd.DataFrame(HAND + [_pt(4, 1000, 2000, 109, 2162)]))
    assert fit.model.issue_floor_ns[(4, 1000)] == pytest.approx(105.0)


def test_fit_defaults_and_the_reason_when_q_is_fitted(hand_fit):
    assert hand_fit.model.platform == "" and hand_fit.capacity_reason is None and hand_fit.model.capacity_by_producers
    assert set(hand_fit.capacity) == {4, 8} and hand_fit.model.rate_by_configuration_gbps == {(4, 1000): pytest.approx(2.0), (8, 1000): pytest.approx(5.0)}
    again = fit_calibration(pd.DataFrame(HAND))
    assert again.capacity == hand_fit.capacity  # the bootstrap is seeded: the same intervals every time


def test_a_lower_bound_fit_keeps_its_store_and_without_a_gap_0_launch_has_no_bound():
    bulk = fit_calibration(pd.DataFrame([_pt(4, 1000, 0, 100, 160, store="bulk"), _pt(4, 1000, 5000, 104, 5150, store="bulk")]))
    assert bulk.rates is None and bulk.store == "bulk"
    none = fit_calibration(pd.DataFrame([_pt(4, 1000, 5000, 104, 5150)]))
    assert none.rates is None and np.isnan(none.model.rate_gbps) and none.capacity_reason.startswith("no drain-limited periodic launch: R >= nan GB/s")


def _relative_line(v, t):
    """(a, b) minimising Σ((a + b·V − T)/T)² (calibration_capacity.floor_trend_ns' fit), by least squares."""
    (a, b), *_ = np.linalg.lstsq(np.column_stack([1 / np.asarray(t), np.asarray(v) / np.asarray(t)]), np.ones(len(v)), rcond=None)
    return a, b


def test_past_the_isolated_knee_the_floor_is_the_trend_from_below():
    """HAND plus isolated K=4 launches at V = 500, 1000, 2000, 8000, 16000 (B = 125 … 4000), medians 15, 25, 50, 300, 700,
    p90 over 1.05 × the median from 8000 on. Tail knee at 8000 (the body detector also finds it there: from i = 3 every
    median is over 1.15 × max(trend, 50·V/2000)). V_lo = 2000: the floors of 8000 and 16000 become the trend over 500 … 2000
    (within 2 octaves of 2000), a relative least-squares line; 2000 itself (not past V_lo) keeps its own median.
    With R(4) = 2: Q in [2000 − 2·trend(2000), 8000 − 2·trend(8000)], below the whole Q grid (64 KiB …): Q(4) is its
    geometric centre."""
    iso = [_pt(4, b, 0, m, 0, mode="isolated", p90=q) for b, m, q in
           ((125, 15, 15), (250, 25, 25), (500, 50, 50), (2000, 300, 320), (4000, 700, 750))]
    iso.append(_pt(2, 1000, 0, 900, 0, mode="isolated", p90=2000))  # one K = 2 volume: no knee there, K = 4 is still done
    fit = fit_calibration(pd.DataFrame(HAND + iso))
    a, b = _relative_line([500.0, 1000.0, 2000.0], [15.0, 25.0, 50.0])
    f = fit.model.issue_floor_ns
    assert [f[(4, 125)], f[(4, 250)], f[(4, 500)]] == pytest.approx([15.0, 25.0, 50.0])
    assert f[(4, 2000)] == pytest.approx(a + 8000 * b) and f[(4, 4000)] == pytest.approx(a + 16000 * b)
    knee = fit.capacity[4].knee
    assert (knee.detector, knee.v_lo_bytes, knee.v_hi_bytes) == ("tail", 2000.0, 8000.0)
    q_lo, q_hi = 2000 - 2 * (a + 2000 * b), 8000 - 2 * (a + 8000 * b)
    assert (knee.q_lo_bytes, knee.q_hi_bytes) == (pytest.approx(q_lo), pytest.approx(q_hi))
    assert fit.model.capacity([4])[0] == pytest.approx(np.sqrt(q_lo * q_hi))
    assert f[(2, 1000)] == pytest.approx(900.0) and fit.capacity[2].knee is None


# K = 4, B = 1000: recovered at G = 3000, 6000 (T_iss^0 = median(100, 110) = 105, o = median(45, 55) = 50) and one
# drain-limited launch at G = 1800 (1950 ≥ 2·105; R = 4000/2000 = 2). The recurrence's backlog grows by at most
# 4000 − 2·(105 + 1800 + 50) = 90 B per burst, under 64 × 90 = 5760 B in a launch: no Q of the grid (≥ 64 KiB) stalls it,
# so the transients do not depend on Q.
FLAT_Q = [_pt(4, 1000, 3000, 100, 3150), _pt(4, 1000, 6000, 110, 6160), _pt(4, 1000, 1800, 1950, 2000)]


def test_without_a_capacity_the_reason_says_why():
    fit = fit_calibration(pd.DataFrame(FLAT_Q))
    assert fit.rates.rate_gbps == pytest.approx(2.0) and fit.model.loop_overhead_ns == pytest.approx(50.0)
    assert fit.model.capacity_by_producers is None and fit.capacity[4].q_bytes is None
    assert fit.capacity_reason == "the periodic transients do not depend on Q and there are no isolated launches"
    assert set(fit.errors) == {"ss"}  # no Q: no recurrence line
    # isolated launches proportional to V (400 → 10 ns, 800 → 20 ns): no knee, Q ≥ 800 − 2·20 = 760, below the grid
    iso = [_pt(4, 100, 0, 10, 0, mode="isolated"), _pt(4, 200, 0, 20, 0, mode="isolated")]
    fit = fit_calibration(pd.DataFrame(FLAT_Q + iso))
    assert fit.capacity[4].knee.detector == "none" and fit.capacity[4].knee.q_lo_bytes == pytest.approx(760.0)
    assert fit.model.capacity_by_producers is None and fit.capacity_reason == (
        "isolated bursts never left the recovered floor and the transients do not bound Q: Q exceeds the largest isolated volume")


def test_the_recurrence_runs_over_each_launchs_own_bursts():
    """V = 4000 B, R = 2, T0 = 100, G = 0, o = 50, Q = 149950 B: unstalled, the backlog grows 4000 − 2·150 = 3700 B per
    burst; burst n stalls once 3700·n + 4000 − Q > 2·T0, i.e. from n = 40 (148000 B): it issues (148000 + 4000 − 149950)/2
    = 1025 ns, leaves 149950 − 100 B, and every later burst issues (Q − 100 + 4000 − Q)/2 = 1950 ns.
    64 bursts (also a launch without its count): bursts 16..62 = 24 × 100, 1025, 22 × 1950: median 100, period 150.
    65 bursts: 16..63 = 24 × 100, 1025, 23 × 1950: median (100 + 1025)/2 = 562.5. 17 bursts: none past the warm-up."""
    model = PlatformModel(2.0, {(4, 1000): 100.0}, {4: 149950.0}, 50.0)
    pts = pd.DataFrame([dict(_pt(4, 1000, 0, 1950, 2000), bursts=n) for n in (64, np.nan, 65, 17)])
    p = predict(pts, model)
    np.testing.assert_allclose(p["pred_issue_rec_ns"], [100.0, 100.0, 562.5, np.nan])
    np.testing.assert_allclose(p["pred_period_rec_ns"], [150.0, 150.0, 612.5, np.nan])


def test_a_launch_at_twice_the_floor_is_drain_limited():
    """K = 4, B = 1000, floor 100 (the G = 3000 and 6000 launches): the G = 1000 launch issues in exactly 2 × 100 ns, so it is
    drain-limited with the G = 0 one: R = median(4000/2000, 4000/2500) = 1.8. Recovered by construction then needs
    G ≥ 1.5·4000/1.8 = 3333: the G = 6000 launch alone gives o = 6150 − 6000 − 100 = 50 (G = 3000 would give 40)."""
    pts = [_pt(4, 1000, 3000, 100, 3140), _pt(4, 1000, 6000, 100, 6150), _pt(4, 1000, 0, 1900, 2000), _pt(4, 1000, 1000, 200, 2500)]
    fit = fit_calibration(pd.DataFrame(pts))
    assert fit.rates.points == 2 and fit.rates.rate_gbps == pytest.approx(1.8)
    assert fit.model.loop_overhead_ns == pytest.approx(50.0)


def test_half_iqr_by_hand():
    from xstage_trace.analysis.calibration_fit import _half_iqr

    # numpy percentiles of 1..5: 25 % → 2, 75 % → 4: (4 − 2)/2 = 1; of 1..4: 1.75 and 3.25: 0.75
    assert _half_iqr(np.array([1.0, 2.0, 3.0, 4.0, 5.0])) == pytest.approx(1.0)
    assert _half_iqr(np.array([4.0, 1.0, 3.0, 2.0])) == pytest.approx(0.75)


def test_a_producer_count_at_exactly_the_spread_from_the_pooled_rate_uses_it():
    """K = 4 drains at 2.0, 2.0 GB/s (4000 B per 2000 ns), K = 6 at 3.0, 3.0 (6000 B per 2000 ns): pooled median 2.5,
    percentiles 25 / 75 % of [2, 2, 3, 3] = 2, 3: half-IQR 0.5. Each K's median is 0.5 from the pooled one, not more than
    max(0, 0.5): both use 2.5, and so does K = 8, which has no drain-limited launch."""
    pts = [_pt(4, 1000, 0, 1900, 2000), _pt(4, 1000, 500, 1400, 2000), _pt(4, 1000, 6000, 100, 6150),
           _pt(6, 1000, 0, 1900, 2000), _pt(6, 1000, 500, 1400, 2000), _pt(6, 1000, 6000, 100, 6150),
           _pt(8, 1000, 9000, 100, 9150)]
    r = fit_calibration(pd.DataFrame(pts)).rates
    assert (r.rate_gbps, r.uncertainty_gbps) == (pytest.approx(2.5), pytest.approx(0.5))
    assert r.measured_by_producers[4]["differs"] is False and r.measured_by_producers[6]["differs"] is False
    assert r.used_by_producers == {4: pytest.approx(2.5), 6: pytest.approx(2.5), 8: pytest.approx(2.5)}
    assert r.by_configuration[(6, 1000)] == {"rate_gbps": pytest.approx(3.0), "uncertainty_gbps": pytest.approx(0.0), "points": 2}


def test_loop_overhead_edges_by_hand():
    # the floor comes from an isolated launch only: no periodic plateau launch, o = 0
    pts = [_pt(4, 1000, 0, 1900, 2000), _pt(4, 1000, 0, 100, 0, mode="isolated")]
    assert fit_calibration(pd.DataFrame(pts)).model.loop_overhead_ns == 0.0
    # one plateau launch (G = 3000 ≥ 1.5·4000/2): o = 3100.5 − 3000 − 100 = 0.5; one 60 ns early: o = max(−60, 0) = 0
    assert fit_calibration(pd.DataFrame(pts[:1] + [_pt(4, 1000, 3000, 100, 3100.5)])).model.loop_overhead_ns == pytest.approx(0.5)
    assert fit_calibration(pd.DataFrame(pts[:1] + [_pt(4, 1000, 3000, 100, 3040)])).model.loop_overhead_ns == 0.0
    # a 1 ns gap is a plateau where V/R is under 1/1.5 ns: K = 1, B = 1 (R = the pooled 2: 1.5·1/2 = 0.75 ≤ 1): o = 61 − 1 − 10
    tiny = fit_calibration(pd.DataFrame(pts[:1] + [_pt(1, 1, 1, 10, 61), _pt(4, 1000, 0, 100, 0, mode="isolated")]))
    assert tiny.model.loop_overhead_ns == pytest.approx(50.0)


def test_a_floor_at_exactly_ten_percent_over_the_smallest_counts():
    # periodic launches at (4, 250), recovered by construction (G ≥ 1.5·1000/2 = 750): 80 ns and 80·1.1 = 88 ns (on the
    # edge): T_iss^0 = median(80, 88) = 84
    fit = fit_calibration(pd.DataFrame(HAND + [_pt(4, 250, 1000, 80, 1130), _pt(4, 250, 2000, 80 * (1 + 0.10), 2138)]))
    assert fit.model.issue_floor_ns[(4, 250)] == pytest.approx(84.0)


def test_transient_errors_use_each_launchs_floor_and_configuration_rate():
    """Two K = 8, B = 100000 launches (V = 800000 B), T_iss^0(8, 100000) = 200 ns (K = 4 has 100 ns at B = 1000), o = 50,
    R(8, 100000) = 5 GB/s (R(K) = 3). G = 0, measured 160000 ns: at the smallest Q of the grid (64 KiB ≪ V) the first
    burst stalls and every later one issues V/R − G − o: period V/R = 160000, error 0. G = 10^6, measured 10^6 ns: the
    backlog never grows (800000 < 5·(200 + 10^6 + 50)); at Q = 1 GiB the period is 200 + 10^6 + 50: error 0.025 %."""
    from xstage_trace.analysis.calibration_fit import CAPACITY_GRID_BYTES, _transient_errors

    base = CalibratedPlatform(1.0, {(4, 1000): 100.0, (8, 100000): 200.0}, None, 50.0, "", "", {4: 3.0, 8: 3.0},
                              {(4, 1000): 2.0, (8, 100000): 5.0})
    per = pd.DataFrame([_pt(8, 100000, 0, 1, 160000), _pt(8, 100000, 10**6, 1, 10**6)])
    e = _transient_errors(per, base)
    assert e.shape == (2, len(CAPACITY_GRID_BYTES))
    assert e[0, 0] == pytest.approx(0.0, abs=1e-9) and e[1, -1] == pytest.approx(100 * 250 / 10**6)


def test_each_producer_count_takes_its_own_transients():
    """FLAT_Q's K = 4 launches and K = 8, B = 1000: drain-limited at G = 0 (1550 ≥ 2·200; 8000/1600 = 5 GB/s), recovered at
    G = 6000 (200 ns). One drain-limited launch per K: neither K differs from the pooled median of [2, 5] = 3.5, which
    marks as recovered K = 4 from G ≥ 1714 and K = 8 from G ≥ 3429: floors 105 (4) and 200 (8), o = median(95, 45, 55,
    50) = 52.5. K = 4's backlog still grows at most 4000 − 2·(105 + 1800 + 52.5) = 85 B per burst (R(4, 1000) = 2): its
    transients do not depend on Q (and it has no isolated launch): no Q(4). K = 8's grows 8000 − 5·(200 + 52.5) B per burst
    at G = 0: it stalls at the small Q of the grid and not at 1 GiB: Q(8) is fitted."""
    fit = fit_calibration(pd.DataFrame(FLAT_Q + [_pt(8, 1000, 0, 1550, 1600), _pt(8, 1000, 6000, 200, 6250)]))
    assert fit.rates.used_by_producers == {4: pytest.approx(3.5), 8: pytest.approx(3.5)}
    assert fit.model.loop_overhead_ns == pytest.approx(52.5)
    assert fit.capacity[4].q_bytes is None and fit.capacity[8].q_bytes is not None
    assert fit.capacity_reason is None and set(fit.model.capacity_by_producers) == {8}


def test_a_sweep_of_gap_0_launches_alone_is_refused_not_read_as_a_lower_bound():
    """Two G = 0 launches and nothing else: neither is drain-limited against the other (1950 < 2·1500), so R has only
    its lower bound 4000 / 2000 = 2 GB/s; at it no launch is recovered (G = 0 < 1.5·V/R = 3000 ns), so their issue
    times are drain times, not floors: refused. One launch at G = 3000 issuing in 100 ns (recovered) gives the floor, and
    against it the G = 0 launches are drain-limited (≥ 2 × 100): R = 4000 B / 2000 ns = 2 GB/s is fitted."""
    from xstage_trace.analysis.calibration_fit import UnrecoveredSweep

    zero = [_pt(4, 1000, 0, 1500, 2000), _pt(4, 1000, 0, 1950, 2000)]
    with pytest.raises(UnrecoveredSweep, match=r"^the host/stg points hold no recovered launch"):
        fit_calibration(pd.DataFrame(zero))
    fit = fit_calibration(pd.DataFrame(zero + [_pt(4, 1000, 3000, 100, 3150)]))
    assert fit.rates.rate_gbps == pytest.approx(2.0) and fit.model.issue_floor_ns == {(4, 1000): 100.0}


def test_the_transients_are_read_with_each_configurations_rate():
    """K = 8 at two B: B = 1000 drains at 5 GB/s (8000 B in 1600 ns at G = 0 and G = 1000), B = 4000 at 2 GB/s (32000 B in
    16000 ns at G = 0 and G = 8000); floors 200 ns from the recovered launches, o = 50 ns; the pooled R(8) = median(5, 5, 2, 2)
    = 3.5 fits neither. With R(8, B) the G = 1000 launch's backlog grows 8000 − 5·(200 + 1000 + 50) = 1750 B per burst and
    reaches the grid's smallest Q (64 KiB) by burst 38, so the median of bursts 16 … 63 is the drained period V/R = 1600 ns,
    as are the others' (they grow faster): the transients are told apart from the grid's first Q on, and at the fitted Q
    the recurrence reproduces every period. Read with R(8) = 3.5 they would point elsewhere (stalled periods V/3.5)."""
    from xstage_trace.analysis.calibration_fit import CAPACITY_GRID_BYTES

    pts = [_pt(8, 1000, 0, 1550, 1600), _pt(8, 1000, 1000, 600, 1600), _pt(8, 1000, 6000, 200, 6250),
           _pt(8, 4000, 0, 15950, 16000), _pt(8, 4000, 8000, 8000, 16000), _pt(8, 4000, 60000, 200, 60250)]
    fit = fit_calibration(pd.DataFrame(pts))
    assert fit.rates.used_by_producers == {8: pytest.approx(3.5)}
    assert fit.model.rate_by_configuration_gbps == {(8, 1000): pytest.approx(5.0), (8, 4000): pytest.approx(2.0)}
    assert fit.capacity[8].transient_bytes[0] == pytest.approx(CAPACITY_GRID_BYTES[0])
    assert fit.points["period_err_rec_pct"].to_numpy() == pytest.approx(np.zeros(len(pts)), abs=1e-9)


def test_the_same_sweep_fits_to_the_same_capacity_interval_every_time():
    """The bootstrap of the isolated launches is seeded: five fits of one sweep (HAND plus five isolated K = 4 volumes, so
    Q(4)'s interval comes from resampling them) give one interval, not five."""
    iso = [_pt(4, b, 0, m, 0, mode="isolated", p90=q) for b, m, q in
           ((125, 15, 15), (250, 25, 25), (500, 50, 50), (2000, 300, 320), (4000, 700, 750))]
    intervals = {fit_calibration(pd.DataFrame(HAND + iso)).capacity[4].interval_bytes for _ in range(5)}
    assert len(intervals) == 1
