"""Two runs' raw measurements side by side (analysis/calibration_crossrun.py, docs/model.md §3) on runs small
enough to classify by hand: every number asserted below is worked out in the comments from the rules of the
module docstring (recovered: median issue ≤ 1.1 × the (K, B)'s smallest; drain-limited: ≥ 2 × it)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.calibration_crossrun import compare_runs


def _run(rows):
    return pd.DataFrame([{"dest": "host", "mode": mode, "K": k, "B": b, "V": k * b, "gap_ns": float(g), "tiss_med_ns": float(t),
                          "period_med_ns": float(p)} for mode, k, b, g, t, p in rows])


# Run A (the fitting run). K=4, B=1000 (V = 4000 B): floor 80 (the isolated 40 ns launch is not periodic and does not
# count), recovered ≤ 80·1.1 = 88 exactly (88 is on the edge: recovered), drain-limited ≥ 160.
# K=8 (V = 8000 B): floor 200, recovered ≤ 220, drain-limited ≥ 400 (400 is on the edge: drain-limited).
FIT = [("periodic", 4, 1000, 0, 1900, 2000), ("periodic", 4, 1000, 500, 1500, 2500), ("periodic", 4, 1000, 1000, 900, 2000),
       ("periodic", 4, 1000, 3000, 80, 3150), ("periodic", 4, 1000, 6000, 80 * (1 + 0.10), 6160),
       ("periodic", 4, 1000, 9000, 200, 9200),  # drain-limited (≥ 160) here, recovered in run B: in neither comparison
       ("periodic", 4, 1000, 12000, 80, 12150),  # not measured by run B
       ("isolated", 4, 1000, 0, 40, 0),
       ("periodic", 8, 1000, 0, 950, 1000), ("periodic", 8, 1000, 500, 400, 2000), ("periodic", 8, 1000, 3000, 200, 3250)]
# Run B. K=4: floor 90, recovered ≤ 99 (90, 95, 99), drain-limited ≥ 180. K=8: floor 250, recovered ≤ 275,
# drain-limited ≥ 500 (500 on the edge).
OTHER = [("periodic", 4, 1000, 0, 1800, 2500), ("periodic", 4, 1000, 500, 1400, 2000), ("periodic", 4, 1000, 1000, 800, 2500),
         ("periodic", 4, 1000, 3000, 90, 3200), ("periodic", 4, 1000, 6000, 95, 6190), ("periodic", 4, 1000, 9000, 99, 9180),
         ("periodic", 8, 1000, 0, 1000, 2000), ("periodic", 8, 1000, 500, 500, 2000), ("periodic", 8, 1000, 3000, 250, 3300),
         ("periodic", 8, 1000, 64000, 250, 64300)]  # not measured by run A


def _stats(x):
    x = np.asarray(x, dtype=np.float64)
    return {"median": pytest.approx(float(np.median(x))), "mean": pytest.approx(float(np.mean(x))), "min": pytest.approx(float(x.min())),
            "max": pytest.approx(float(x.max())), "points": len(x)}


def test_period_difference_over_the_shared_periodic_points():
    d = compare_runs(_run(FIT), _run(OTHER))
    # shared (K, G): (4: 0, 500, 1000, 3000, 6000, 9000), (8: 0, 500, 3000) = 9 (the isolated launch is not one)
    assert d["shared_points"] == 9
    # 100·|T_B/T_A − 1|: 2500/2000 → 25, 2000/2500 → 20, 2500/2000 → 25, 3200/3150, 6190/6160, 9180/9200,
    # 2000/1000 → 100, 2000/2000 → 0, 3300/3250
    diff = [25.0, 20.0, 25.0, 100 * 50 / 3150, 100 * 30 / 6160, 100 * 20 / 9200, 100.0, 0.0, 100 * 50 / 3250]
    assert d["period_difference_pct"] == _stats(diff)
    assert d["period_difference_pct"]["median"] == pytest.approx(100 * 50 / 3150)  # the 5th of the 9 sorted


def test_floor_offsets_over_the_launches_recovered_in_both_runs():
    d = compare_runs(_run(FIT), _run(OTHER))
    # recovered in both: (4, 3000), (4, 6000) (A on its 88 ns edge), (8, 3000); (4, 9000) is recovered in B only.
    # (T_B − G) − (T_A − G): 200 − 150 = 50, 190 − 160 = 30, 300 − 250 = 50
    assert d["floor_offset_ns"] == _stats([50.0, 30.0, 50.0])
    # issue: 90 − 80 = 10, 95 − 88 = 7, 250 − 200 = 50
    assert d["issue_floor_offset_ns"] == _stats([10.0, 7.0, 50.0])


def test_drain_rate_ratio_over_the_launches_drain_limited_in_both_runs():
    d = compare_runs(_run(FIT), _run(OTHER))
    # drain-limited in both: K=4 G = 0, 500, 1000; K=8 G = 0, 500 (both runs on their 2× edge); (4, 9000) in run A only.
    # R = V/T: A K=4 2.0, 1.6, 2.0; B K=4 1.6, 2.0, 1.6; A K=8 8.0, 4.0; B K=8 4.0, 4.0
    # R_A/R_B: 1.25, 0.8, 1.25, 2.0, 1.0 → median 1.25
    # bound 100·|R_B / median R_A of the (K, B) − 1|: K=4 (median 2.0): 20, 0, 20; K=8 (median 6.0): 33.3, 33.3
    r = d["drain_rate_ratio"]
    bound = [20.0, 0.0, 20.0, 100 / 3, 100 / 3]
    assert r == {"median": pytest.approx(1.25), "launches": 5, "period_err_bound_median_pct": pytest.approx(20.0),
                 "period_err_bound_mean_pct": pytest.approx(np.mean(bound))}
    # per configuration: medians of the rates above
    assert d["rate_ratio_by_configuration"] == {
        "4,1000": {"fit_gbps": pytest.approx(2.0), "other_gbps": pytest.approx(1.6), "ratio": pytest.approx(1.25), "launches": 3},
        "8,1000": {"fit_gbps": pytest.approx(6.0), "other_gbps": pytest.approx(4.0), "ratio": pytest.approx(1.5), "launches": 2}}


def test_runs_with_nothing_in_common_give_no_statistics():
    # the same configuration at gaps the other run did not measure: nothing shared
    d = compare_runs(_run(FIT[:3]), _run([("periodic", 4, 1000, 7000, 90, 7200)]))
    assert d == {"shared_points": 0, "period_difference_pct": None, "floor_offset_ns": None, "issue_floor_offset_ns": None,
                 "drain_rate_ratio": None, "rate_ratio_by_configuration": {}}
    # shared but recovered in both only (no drain-limited launch): a floor offset, no rate ratio
    only = compare_runs(_run([("periodic", 4, 1000, 3000, 80, 3150)]), _run([("periodic", 4, 1000, 3000, 90, 3200)]))
    assert only["floor_offset_ns"] == _stats([50.0]) and only["drain_rate_ratio"] is None and only["rate_ratio_by_configuration"] == {}
