"""Calibration fit on real H200 sweeps: our probe-measured bench, the reference sweep of another day,
the two NVLink peer directions; cross-run prediction with no refit against the issue's goals.

Goals (issue 10, H200 host path): median ≤ 1 %, mean ≤ 5 % period error on the fitting run; median
≤ 3 %, mean ≤ 10 % on the other run. Where a goal is not met, the test asserts the honest bound
and says so. The two host runs differ in their raw measurements (a fixed per-burst cost, and drain
rates at the same (K, B)); tests below check those differences from the CSVs by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import CALIB, REFERENCE, SAMPLES
from xstage_trace.analysis.calibration_fit import CalibratedPlatform, fit_calibration, validate
from xstage_trace.analysis.calibration_points import calibration_points
from xstage_trace.analysis.calibration_model import load_platform_from_doc
from xstage_trace.collectors.calibration_io import period_errors_of
from xstage_trace.collectors.collect import collect

PEER = SAMPLES / "h200x2_peer"
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def ours():
    return pd.read_csv(CALIB / "calibration_points.csv")


@pytest.fixture(scope="module")
def reference():
    return pd.read_csv(REFERENCE / "h200_burst_gap_sweep.csv")


@pytest.fixture(scope="module")
def fit_ours(ours):
    return fit_calibration(ours, store_path="host")


@pytest.fixture(scope="module")
def fit_ref(reference):
    return fit_calibration(reference, store_path="host")


def drain_limited(points: pd.DataFrame) -> pd.DataFrame:
    """By hand: the host periodic launches whose median issue is ≥ 2× the smallest median issue of
    any launch (periodic or isolated) of the same (K, B), with their V / period (docs/model.md §3: the
    drain-limited period is V/R at any gap)."""
    h = points[points["dest"] == "host"]
    smallest = h.groupby(["K", "B"])["tiss_med_ns"].min()
    per = h[h["mode"] == "periodic"]
    per = per[per["tiss_med_ns"].to_numpy() >= 2 * smallest.reindex(pd.MultiIndex.from_frame(per[["K", "B"]])).to_numpy()]
    return per.assign(rate=per["V"] / per["period_med_ns"])


def drain_limited_rate(points: pd.DataFrame, k: int) -> float:
    """By hand: median V/period of K's drain-limited host launches."""
    d = drain_limited(points)
    return float(d.loc[d["K"] == k, "rate"].median())


@pytest.mark.parametrize("which", ["ours", "reference"])
def test_fitting_run_meets_the_goal(which, fit_ours, fit_ref):
    fit = fit_ours if which == "ours" else fit_ref
    rec, eq1 = fit.errors["rec"], fit.errors["ss"]
    assert rec["period_err_median_pct"] <= 1.0 and rec["period_err_mean_pct"] <= 5.0
    # Eq. 1 + loop overhead cannot see the transients (whole launch inside Q); the recurrence can
    assert eq1["period_err_mean_pct"] > 3 * rec["period_err_mean_pct"]
    tiny = fit.points[(fit.points["B"] == 2048) & (fit.points["gap_ns"] == 0)]
    assert (tiny["period_err_rec_pct"] < 50).all() and (tiny["period_err_ss_pct"] > 100).all()


@pytest.mark.parametrize("which", ["ours", "reference"])
def test_rate_per_producer_count_is_the_measured_drain(which, ours, reference, fit_ours, fit_ref):
    pts, fit = (ours, fit_ours) if which == "ours" else (reference, fit_ref)
    r33 = drain_limited_rate(pts, 33)
    assert fit.rates.used_by_producers[33] == pytest.approx(r33)
    assert fit.rates.measured_by_producers[33]["differs"]
    # 33 producers drain the PCIe path faster than 132 (issue 10: ~89 vs ~66 GB/s)
    assert r33 > 1.15 * drain_limited_rate(pts, 132)
    assert 60 <= fit.model.rate_gbps <= 75  # the single pooled R, kept for version-1 readers
    assert fit.model.rate(np.array([33]))[0] == pytest.approx(r33)


@pytest.mark.parametrize("which", ["ours", "reference"])
def test_rate_per_configuration_is_the_measured_drain(which, ours, reference, fit_ours, fit_ref):
    pts, fit = (ours, fit_ours) if which == "ours" else (reference, fit_ref)
    hand = drain_limited(pts).groupby(["K", "B"])["rate"].agg(["median", "size"])
    conf = fit.rates.by_configuration
    assert set(conf) == set(hand.index)
    for kb, row in hand.iterrows():
        assert conf[kb]["rate_gbps"] == pytest.approx(row["median"]) and conf[kb]["points"] == row["size"]
        assert fit.model.rate([kb[0]], [kb[1]])[0] == pytest.approx(row["median"])
    # the data say R depends on B at fixed K: 33 producers with 8 KiB bursts drain > 15 % slower than with 32 KiB
    assert conf[(33, 8192)]["rate_gbps"] < 0.85 * conf[(33, 32768)]["rate_gbps"]


@pytest.fixture(scope="module")
def fit_ours_earlier():
    """Our previous run of the same bench and sweep (2026-11-29), kept as its points."""
    return fit_calibration(pd.read_csv(CALIB / "calibration_points_2026-11-29.csv"), store_path="host")


@pytest.fixture(scope="module")
def ours_1424():
    """Our run of the same sweep at 2026-12-01 14:24 UTC (commit 0614936, burst kernel of the same
    machine code as the shipped run's), kept as its points."""
    return pd.read_csv(CALIB / "calibration_points_2026-12-01T1424.csv")


@pytest.fixture(scope="module")
def fit_ours_1424(ours_1424):
    return fit_calibration(ours_1424, store_path="host")


@pytest.fixture(scope="module")
def ours_1632():
    """Our run of the same sweep at 2026-12-01 16:32 UTC (commit 5feb1f1, the same burst kernel machine
    code as the shipped run's), shipped until the 19:48 run, kept as its points."""
    return pd.read_csv(CALIB / "calibration_points_2026-12-01T1632.csv")


@pytest.fixture(scope="module")
def fit_ours_1632(ours_1632):
    return fit_calibration(ours_1632, store_path="host")


def _isolated_knee_is_a_persistent_tail_knee(fit):
    k66, k132 = fit.capacity[66], fit.capacity[132]
    assert k66.knee.detector == "tail" and k132.knee.detector == "tail"
    assert k66.q_bytes <= k132.q_bytes
    for c in (k66, k132):
        lo, hi = c.interval_bytes
        assert lo <= c.q_bytes <= hi and c.source.startswith("isolated knee")
    assert fit.capacity[33].source.startswith("periodic transients")  # no isolated launches at K = 33


def test_our_earlier_isolated_knee_is_the_tail_knee_of_the_reference_readme(fit_ours_earlier):
    _isolated_knee_is_a_persistent_tail_knee(fit_ours_earlier)
    k66 = fit_ours_earlier.capacity[66]
    # reference README: the p90 tail knee lies between about 8 and 17 MB
    assert 8e6 <= k66.knee.v_lo_bytes < k66.knee.v_hi_bytes <= 17e6


def _isolated_volumes(points: pd.DataFrame, k: int) -> list[float]:
    """The swept isolated volumes of K on the host path, ascending (the knee's grid)."""
    iso = points[(points["dest"] == "host") & (points["mode"] == "isolated") & (points["K"] == k)]
    return sorted(iso["V"].astype(float).unique())


def test_isolated_knee_and_capacity_reproduce_across_our_two_runs(fit_ours_1424, fit_ours_earlier):
    """Two runs of the same sweep two days apart (2026-11-29, 2026-12-01 14:24): at K = 132 the knee
    lies between the same two swept volumes; at K = 66 it moved one volume step up (16.5 → 24.75 MiB
    in the 2026-12-01 run), and each capacity's bootstrap interval overlaps the other run's."""
    _isolated_knee_is_a_persistent_tail_knee(fit_ours_1424)
    new, old = fit_ours_1424.capacity, fit_ours_earlier.capacity
    assert (new[132].knee.v_lo_bytes, new[132].knee.v_hi_bytes) == (old[132].knee.v_lo_bytes, old[132].knee.v_hi_bytes)
    for k in (66, 132):
        (a_lo, a_hi), (b_lo, b_hi) = new[k].interval_bytes, old[k].interval_bytes
        assert a_lo <= b_hi and b_lo <= a_hi


def test_same_day_rerun_reproduces_within_the_goal(ours_1632, ours_1424, fit_ours_1632, fit_ours_1424):
    """The 16:32 UTC run against the 14:24 one, same sweep and burst kernel: issue 10's
    cross-run goal (median ≤ 3 %, mean ≤ 10 %) both ways with no refit, every capacity interval
    overlapping the other run's; at K = 132 the isolated knee moved one swept volume up (16.5–24.75 →
    24.75–33 MiB), at K = 66 it stayed."""
    _isolated_knee_is_a_persistent_tail_knee(fit_ours_1632)
    for fit, other in ((fit_ours_1632, ours_1424), (fit_ours_1424, ours_1632)):
        v = validate(fit, other)
        assert len(v.points) == 120
        assert v.errors["rec"]["period_err_median_pct"] <= 3.0 and v.errors["rec"]["period_err_mean_pct"] <= 10.0
    new, old = fit_ours_1632.capacity, fit_ours_1424.capacity
    for k in (33, 66, 132):
        (a_lo, a_hi), (b_lo, b_hi) = new[k].interval_bytes, old[k].interval_bytes
        assert a_lo <= b_hi and b_lo <= a_hi
    assert (new[66].knee.v_lo_bytes, new[66].knee.v_hi_bytes) == (old[66].knee.v_lo_bytes, old[66].knee.v_hi_bytes)
    grid = _isolated_volumes(ours_1632, 132)
    assert grid == _isolated_volumes(ours_1424, 132)
    assert grid.index(new[132].knee.v_lo_bytes) == grid.index(old[132].knee.v_lo_bytes) + 1


def test_persistent_knee_ignores_one_slow_launch_below_it():
    pts = pd.read_csv(PEER / "calibration_points.csv")
    iso = pts[(pts["dest"] == "peer0to1") & (pts["mode"] == "isolated") & (pts["K"] == 132)].set_index("B")
    # the data: one slow tail at B = 24 KiB, back on the median at 32 and 48 KiB
    assert iso.loc[24576, "tiss_p90_ns"] > 1.3 * iso.loc[24576, "tiss_med_ns"]
    assert (iso.loc[[32768, 49152], "tiss_p90_ns"] < 1.05 * iso.loc[[32768, 49152], "tiss_med_ns"]).all()
    knee = fit_calibration(pts, store_path="peer0to1").capacity[132].knee
    assert knee.v_lo_bytes >= iso.loc[49152, "V"]


def test_isolated_law_is_scored(fit_ours):
    iso, e = fit_ours.isolated, fit_ours.isolated_errors
    assert e["points"] == len(iso) == 28
    within = iso[iso["pred_issue_iso_ns"] <= iso["issue_floor_ns"]]
    beyond = iso[iso["pred_issue_iso_ns"] > iso["issue_floor_ns"]]
    assert e["points_beyond_q"] == len(beyond) > 0
    # below Q the law is the floor (fitted from the medians); the p90 tail, not used by the fit, sits on it
    assert e["vs_p90"]["within_q"]["issue_err_median_pct"] < 1.0
    # beyond Q the bench's median and p90 stay far under (V − Q)/R: the law (an aggregate, last-producer
    # time) overestimates every such launch on this path
    assert (beyond["pred_issue_iso_ns"] > beyond["tiss_p90_ns"]).all()


def test_cross_run_host_ours_predicts_the_reference(fit_ours_1424, reference):
    """Issue 10's cross-run goal on the configurations both benches ran, for our 2026-12-01 14:24 run.
    Over all 150 reference launches (60 at (K, B, G) this sweep never ran) that fit gives a median of
    3.01 % (README): over the goal by 0.01 point, so that line is reported, not asserted."""
    v = validate(fit_ours_1424, reference)
    assert len(v.points) == 150 and v.shared_points == 90
    assert v.errors_shared["rec"]["period_err_median_pct"] <= 3.0 and v.errors_shared["rec"]["period_err_mean_pct"] <= 10.0
    assert v.errors["rec"]["period_err_mean_pct"] <= 10.0


def test_cross_run_host_1632_run_and_the_reference_honest_bound(fit_ours_1632, fit_ref, ours_1632, reference):
    """The 16:32 run misses issue 10's goal against the reference: on the shared (K, B, G)
    this fit predicts it with a median of 3.18 % and a mean of 10.65 %, the reference's fit predicts
    it with a median of 3.48 % over all its points (the same-day 14:24 run met the goal both ways,
    test above). Asserted is that honest bound, half a point over the goal's median and one over its
    mean, and that the miss is the two runs' own difference, not the fit's: the measured period
    difference on the shared (K, B, G) is within 0.5 point of the no-refit median error."""
    mine, theirs = validate(fit_ours_1632, reference), validate(fit_ref, ours_1632)
    assert mine.shared_points == theirs.shared_points == 90
    for v in (mine, theirs):
        assert v.errors_shared["rec"]["period_err_median_pct"] <= 3.5 and v.errors_shared["rec"]["period_err_mean_pct"] <= 11.0
        assert v.errors["rec"]["period_err_median_pct"] <= 3.5 and v.errors["rec"]["period_err_mean_pct"] <= 11.0
    measured = mine.measured_difference["period_difference_pct"]["median"]
    assert abs(mine.errors_shared["rec"]["period_err_median_pct"] - measured) < 0.5


def test_cross_run_host_shipped_run_meets_the_goal_against_the_reference(fit_ours, fit_ref, ours, reference):
    """The shipped run (19:48 UTC) and the reference sweep: issue 10's cross-run goal (median ≤ 3 %,
    mean ≤ 10 %) with no refit both ways, over all points and over the 90 shared (K, B, G)."""
    mine, theirs = validate(fit_ours, reference), validate(fit_ref, ours)
    assert mine.shared_points == theirs.shared_points == 90
    for v in (mine, theirs):
        for e in (v.errors, v.errors_shared):
            assert e["rec"]["period_err_median_pct"] <= 3.0 and e["rec"]["period_err_mean_pct"] <= 10.0


@pytest.mark.parametrize("direction", ["new predicts earlier", "earlier predicts new"])
def test_cross_day_goal_between_our_two_runs(direction, ours, fit_ours, fit_ours_earlier):
    """Issue 10's goal (median ≤ 3 %, mean ≤ 10 %) between two runs of our bench on different days
    (2026-11-29 and 2026-12-01), fitted on one, predicting the other with no refit."""
    earlier = pd.read_csv(CALIB / "calibration_points_2026-11-29.csv")
    fit, other = (fit_ours, earlier) if direction == "new predicts earlier" else (fit_ours_earlier, ours)
    v = validate(fit, other)
    assert len(v.points) == len(other[(other["dest"] == "host") & (other["mode"] == "periodic")]) == 120
    assert v.errors["rec"]["period_err_median_pct"] <= 3.0 and v.errors["rec"]["period_err_mean_pct"] <= 10.0


def test_cross_run_host_reference_predicts_ours(fit_ref, ours_1424):
    """The goal over all points of our 14:24 run, though the reference never ran B = 128 KiB: R(K, B)
    carries its 64 KiB rates (61 GB/s at K = 132, against ours 59 at 128 KiB) where one R(K) carried 69."""
    v = validate(fit_ref, ours_1424)
    assert v.errors["rec"]["period_err_median_pct"] <= 3.0 and v.errors["rec"]["period_err_mean_pct"] <= 10.0
    assert v.shared_points == 90
    assert v.errors_shared["rec"]["period_err_median_pct"] <= 3.0 and v.errors_shared["rec"]["period_err_mean_pct"] <= 10.0


def shared_by_hand(ours: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    keys = ["K", "B", "gap_ns"]
    a = ours[(ours["dest"] == "host") & (ours["mode"] == "periodic")]
    b = reference[(reference["dest"] == "host") & (reference["mode"] == "periodic")]
    return a.merge(b, on=keys, suffixes=("_ours", "_ref"))


def test_the_two_host_runs_differ_by_a_fixed_per_burst_cost(ours_1632, reference, fit_ours_1632):
    """Where a burst is recovered in both runs (issue at its (K, B)'s floor), our bench (the 16:32 run) spends a
    constant amount more per burst (T_iss^0 + o) than the reference bench, at every K, B and G
    (~120 ns with the 2026-11-29 build, ~158 ns with the 2026-12-01 one, whose probe record costs
    124 instead of 43 cycles back to back: meta/probe_cost.txt)."""
    m = shared_by_hand(ours_1632, reference)
    floor_o = m.groupby(["K", "B"])["tiss_med_ns_ours"].transform("min")
    floor_r = m.groupby(["K", "B"])["tiss_med_ns_ref"].transform("min")
    rec = m[(m["tiss_med_ns_ours"] <= 1.1 * floor_o) & (m["tiss_med_ns_ref"] <= 1.1 * floor_r)]
    offset = (rec["period_med_ns_ref"] - rec["gap_ns"]) - (rec["period_med_ns_ours"] - rec["gap_ns"])
    # constant: every launch pays it, within ±35 ns of its median (~3 standard deviations of it)
    assert len(rec) >= 50 and (offset < 0).all() and (offset - offset.median()).abs().max() < 35
    d = validate(fit_ours_1632, reference).measured_difference
    assert d["floor_offset_ns"]["median"] == pytest.approx(float(offset.median()))
    assert d["floor_offset_ns"]["points"] == len(rec)


def test_cross_run_drain_error_is_the_run_to_run_rate_difference(ours_1632, reference, fit_ours_1632, fit_ref):
    """On launches drain-limited in both runs (the 16:32 run and the reference), no-refit errors sit at
    the rate ratio of the two runs' own measurements: the fit adds less than 1.5 points to it."""
    for fit, other in ((fit_ours_1632, reference), (fit_ref, ours_1632)):
        v = validate(fit, other)
        bound = v.measured_difference["drain_rate_ratio"]
        assert bound["period_err_bound_median_pct"] > 3.0  # a real difference between the runs, not noise of the fit
        drain = v.errors["rec"]["by_regime"]["drain_limited"]
        assert abs(drain["period_err_median_pct"] - bound["period_err_bound_median_pct"]) < 1.5


@pytest.mark.parametrize("fit_dir, other_dir", [("peer0to1", "peer1to0"), ("peer1to0", "peer0to1")])
def test_cross_direction_peer(fit_dir, other_dir):
    pts = pd.read_csv(PEER / "calibration_points.csv")
    fit = fit_calibration(pts, store_path=fit_dir)
    assert fit.errors["rec"]["period_err_median_pct"] <= 1.0 and fit.errors["rec"]["period_err_mean_pct"] <= 5.0
    v = validate(fit, pts, other_dir)
    assert len(v.points) == 120
    assert v.errors["rec"]["period_err_median_pct"] <= 3.0 and v.errors["rec"]["period_err_mean_pct"] <= 10.0


def test_capacity_intervals_of_the_two_host_runs_overlap(fit_ours_1424, fit_ref):
    """Our 14:24 run and the reference: every Q(K) interval overlaps (or touches) the other's."""
    for k in (33, 66, 132):
        (a_lo, a_hi), (b_lo, b_hi) = fit_ours_1424.capacity[k].interval_bytes, fit_ref.capacity[k].interval_bytes
        assert max(a_lo, b_lo) <= min(a_hi, b_hi) * (1 + 1e-12)  # intervals may touch at one grid volume
    q_ours, q_ref = fit_ours_1424.capacity[132].q_bytes, fit_ref.capacity[132].q_bytes
    assert 1 / 1.5 <= q_ours / q_ref <= 1.5


def test_capacity_of_the_1632_run_against_the_reference(fit_ours_1632, fit_ref):
    """The 16:32 run and the reference: Q(33) and Q(132) intervals overlap; Q(66)'s lower
    end lies above the reference's upper end (by 4.4 %), less than one step of the capacity grid
    (9 %), where the 14:24 run's touched it (test above)."""
    from xstage_trace.analysis.calibration_fit import CAPACITY_GRID_BYTES

    for k in (33, 132):
        (a_lo, a_hi), (b_lo, b_hi) = fit_ours_1632.capacity[k].interval_bytes, fit_ref.capacity[k].interval_bytes
        assert max(a_lo, b_lo) <= min(a_hi, b_hi) * (1 + 1e-12)
    step = CAPACITY_GRID_BYTES[1] / CAPACITY_GRID_BYTES[0]
    ours_lo, ref_hi = fit_ours_1632.capacity[66].interval_bytes[0], fit_ref.capacity[66].interval_bytes[1]
    assert 1 < ours_lo / ref_hi < step


def test_local_path_is_never_drain_limited(ours):
    fit = fit_calibration(ours, store_path="local")
    assert fit.rate_points == 0 and fit.model.capacity_bytes is None
    assert "lower bound" in fit.capacity_reason and fit.model.rate_gbps > 2000


def test_points_from_dumps_match_the_committed_reduction():
    c = collect([CALIB / "quick"])
    pts = calibration_points(*(c.tables[n].to_pandas() for n in ("probes", "probe_slices", "dumps")))
    assert len(pts) == 22
    row = pts[(pts["dest"] == "host") & (pts["mode"] == "periodic") & (pts["B"] == 32768) & (pts["gap_ns"] == 0)].iloc[0]
    # drain-limited: 132 × 32 KiB per burst at ~65 GB/s → ~66 µs periods
    assert 60_000 < row["period_med_ns"] < 72_000
    assert row["tiss_p90_ns"] > row["tiss_med_ns"] > 30_000


def test_version1_json_still_loads_and_reports(tmp_path):
    from xstage_trace.reports.calibration import write_calibration_report

    doc = json.loads((DATA / "calibration_host_v1.json").read_text())
    assert doc["calibration_version"] == 1
    m = load_platform_from_doc(doc)
    assert not isinstance(m, CalibratedPlatform)  # version 1 predicted with its single R
    assert m.rate_gbps == doc["rate_gbps"] and m.capacity_bytes == doc["capacity_bytes"]
    errs = period_errors_of(doc)
    assert errs["recurrence"]["period_err_median_pct"] == doc["errors_recurrence"]["period_err_median_pct"]
    assert errs["eq1_loop_overhead"] == doc["errors_steady_state"]
    write_calibration_report(tmp_path, doc, pd.read_csv(CALIB / "calibration_points.csv"))
    text = (tmp_path / "report_host.md").read_text()
    assert f"K=132: {doc['capacity_by_producers_bytes']['132'] / 2**20:.2f} MiB" in text
    assert f"period error, Eq. 1 + loop overhead (max(T_iss^0 + G + o, V/R), no capacity): median {doc['errors_steady_state']['period_err_median_pct']:.2f} %" in text


def test_report_text_names_both_lines_and_the_validation(tmp_path, fit_ours, reference):
    from xstage_trace.analysis.calibration_model import calibration_document, validation_document
    from xstage_trace.reports.calibration import calibration_report

    v = validate(fit_ours, reference)
    doc = json.loads(json.dumps(calibration_document(fit_ours, None, "ours.csv", validation_document(v, None, "ref.csv", "host")), default=float))
    text = calibration_report(doc, pd.read_csv(CALIB / "calibration_points.csv"))
    assert "period error, Eq. 1 + loop overhead" in text and "period error, recurrence" in text
    assert "Cross-run validation: this fit predicting ref.csv (host)" in text
    assert "K=132: " in text and "isolated law max(T_iss^0, (V − Q)/R)" in text
    assert "| 132 | 69206016 |" in text  # the largest isolated launch (K = 132, V = 132 × 512 KiB) has its row


def test_report_figures_show_measured_and_predicted(tmp_path):
    from xstage_trace.reports.calibration import calibration_figures
    from xstage_trace.reports.calibration import write_calibration_report

    doc = json.loads((CALIB / "calibration_host.json").read_text())
    pts = pd.read_csv(CALIB / "calibration_points.csv")
    figs = calibration_figures(doc, pts)
    assert {"host_period_vs_gap_K132", "host_issue_vs_gap_K132", "host_isolated_issue_K132"} <= set(figs)
    lines = {ln.get_label(): ln for ln in figs["host_period_vs_gap_K132"].axes[0].get_lines()}
    measured = [ln for label, ln in lines.items() if label.endswith("measured")]
    # 4 burst sizes × 10 gaps measured (the sweep's K=132 rows), each with an Eq. 1 and a recurrence curve
    sweep = pts[(pts["dest"] == "host") & (pts["mode"] == "periodic") & (pts["K"] == 132)]
    assert len(measured) == sweep["B"].nunique() == 4
    assert sum(len(ln.get_xdata()) for ln in measured) == len(sweep) == 40
    assert {"B=2 KiB recurrence", "B=2 KiB Eq. 1"} <= set(lines)
    assert "max(T0, (V-Q)/R)" in {ln.get_label() for ln in figs["host_isolated_issue_K132"].axes[0].get_lines()}
    write_calibration_report(tmp_path, doc, pts)
    written = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"host_period_vs_gap_K132.svg", "host_period_vs_gap_K132.png"} <= written
    assert (tmp_path / "figures" / "host_period_vs_gap_K132.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (tmp_path / "figures" / "host_period_vs_gap_K132.svg").read_text()
    report = (tmp_path / "report_host.md").read_text()
    assert "![host_period_vs_gap_K132](figures/host_period_vs_gap_K132.svg)" in report