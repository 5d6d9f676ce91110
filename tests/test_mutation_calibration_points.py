"""Probe records of the calibration bench → one point per launch (analysis/calibration_points.py, docs/model.md §3
inputs), on dumps small enough to reduce by hand: every number asserted below is worked out in the comments
(or by a few lines of numpy over the raw times listed in the test)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.calibration_points import burst_spans, calibration_points, completion_rates
from xstage_trace.analysis.drain_points import completion_rate_gbps

EPOCH_NS = 1_700_000_000_000_000_000  # a %globaltimer epoch: float64 spacing 256 ns here, so times must be relative
PAYLOAD_BYTES = 100


def _bursts(dump, cta, begins_ns, issues_ns, event="burst"):
    """Begin and end records of one CTA's bursts 0, 1, … (the end record carries the payload)."""
    rows = []
    for n, (b, d) in enumerate(zip(begins_ns, issues_ns)):
        rows.append({"dump": dump, "cta": cta, "tile": n, "event": event, "kind": "begin", "t_gt_ns": EPOCH_NS + b, "payload": 0})
        rows.append({"dump": dump, "cta": cta, "tile": n, "event": event, "kind": "end", "t_gt_ns": EPOCH_NS + b + d,
                     "payload": PAYLOAD_BYTES})
    return rows


# Periodic launch "b_per": 2 CTAs × 20 bursts; the first 16 (warm-up) issue in 5000 ns, bursts 16..19 in
# CTA 0: 110, 120, 130, 140 ns (begins every 1000 ns) and CTA 1: 150, 160, 170, 180 ns (begins every 1200 ns, +7).
PER_ISSUE = {0: [5000] * 16 + [110, 120, 130, 140], 1: [5000] * 16 + [150, 160, 170, 180]}
PER_BEGIN = {0: [1000 * n for n in range(20)], 1: [1200 * n + 7 for n in range(20)]}
# Isolated launch "a_iso": 1 CTA × 8 bursts every 100 ns; burst 0 (warm-up) issues in 9000 ns, bursts 1..7 in 10..70.
ISO_ISSUE = [9000] + [10 * n for n in range(1, 8)]
ISO_BEGIN = [100 * n for n in range(8)]


def _probes():
    rows = _bursts("b_per", 0, PER_BEGIN[0], PER_ISSUE[0]) + _bursts("b_per", 1, PER_BEGIN[1], PER_ISSUE[1])
    rows += _bursts("a_iso", 0, ISO_BEGIN, ISO_ISSUE)
    rows += _bursts("b_per", 0, [5], [99999], event="tile")  # another event: not a burst
    rows += _bursts("c_fused", 0, [0, 100], [10, 10]) + _bursts("d_nogap", 0, [0, 100], [10, 10])
    rows += _bursts("e_warm", 0, [0, 100], [10, 10])  # periodic with warm-up bursts only; f_none has no record at all
    return pd.DataFrame(rows)


def _dumps():
    return pd.DataFrame([
        {"dump": "b_per", "mode": "periodic", "dest": "host", "K": 2.0, "B": 100.0, "gap_ns": 50, "store": "bulk", "bursts": 20},
        {"dump": "b_per", "mode": "periodic", "dest": "host", "K": 2.0, "B": 100.0, "gap_ns": 50, "store": "bulk", "bursts": 20},
        {"dump": "b_per", "mode": "periodic", "dest": "peer", "K": 3.0, "B": 100.0, "gap_ns": 50, "store": "bulk", "bursts": 20},
        {"dump": "a_iso", "mode": "isolated", "dest": "host", "K": 1.0, "B": 64.0, "gap_ns": 0, "store": None, "bursts": 8},
        {"dump": "c_fused", "mode": "fused", "dest": "host", "K": 1.0, "B": 64.0, "gap_ns": 0, "store": None, "bursts": 2},
        {"dump": "d_nogap", "mode": "periodic", "dest": "host", "K": 1.0, "B": 64.0, "gap_ns": np.nan, "store": None, "bursts": 2},
        {"dump": "e_warm", "mode": "periodic", "dest": "host", "K": 1.0, "B": 64.0, "gap_ns": 0, "store": None, "bursts": 2},
        {"dump": "f_none", "mode": "isolated", "dest": "host", "K": 1.0, "B": 64.0, "gap_ns": 0, "store": None, "bursts": 2},
    ])


def _slices():
    return pd.DataFrame({"dump": ["b_per", "b_per", "a_iso"], "ns_per_cycle": [0.5, 0.7, 0.4]})


def test_burst_spans_by_hand():
    s = burst_spans(pd.DataFrame(_bursts("x", 3, [0, 1000, 2500], [100, 200, 300]) + _bursts("x", 4, [10], [20])))
    # per CTA in burst order: issue = end − begin, period = next begin − begin, gap = next begin − end (none for the last)
    assert s["dump"].tolist() == ["x"] * 4 and s["cta"].tolist() == [3, 3, 3, 4] and s["burst"].tolist() == [0, 1, 2, 0]
    assert s["begin"].tolist() == [0.0, 1000.0, 2500.0, 10.0] and s["issue_ns"].tolist() == [100.0, 200.0, 300.0, 20.0]
    np.testing.assert_array_equal(s["period_ns"], [1000.0, 1500.0, np.nan, np.nan])
    np.testing.assert_array_equal(s["gap_meas_ns"], [900.0, 1300.0, np.nan, np.nan])
    assert burst_spans(pd.DataFrame(_bursts("x", 3, [0], [1]))).iloc[0]["issue_ns"] == 1.0
    assert burst_spans(pd.DataFrame(_bursts("x", 3, [0], [1], event="tile"))).empty


def test_calibration_points_reduce_each_launch_by_hand():
    p = calibration_points(_probes(), _slices(), _dumps())
    # c_fused (not a calibration mode) and d_nogap (no gap) are left out, and so are e_warm (no burst after its
    # warm-up) and f_none (no burst record); b_per's later rows (a duplicate, and one with another dest and K) do not count.
    # Sorted by dest, store, mode, …: b_per (bulk) before a_iso (no store: stg)
    assert p["dump"].tolist() == ["b_per", "a_iso"] and p.index.tolist() == [0, 1]
    assert list(p.columns) == ["dump", "dest", "store", "mode", "K", "B", "V", "gap_ns", "tiss_med_ns", "tiss_p90_ns", "period_med_ns",
                               "ns_per_cycle", "gap_meas_med_ns", "bursts", "bursts_used", "completion_rate_gbps"]
    per, iso = p.iloc[0], p.iloc[1]
    assert (per["store"], iso["store"], per["mode"], iso["mode"]) == ("bulk", "stg", "periodic", "isolated")
    assert (per["K"], per["B"], per["V"], per["gap_ns"], per["bursts"]) == (2, 100, 200, 50.0, 20)
    assert p["K"].dtype.kind == "i" and p["B"].dtype.kind == "i" and p["gap_ns"].dtype.kind == "f"
    # b_per, bursts 16..19 (4 of them): issue 110..180 → median 145, p90 at rank 0.9·7 = 6.3: 170 + 0.3·10 = 173;
    # periods (burst 19 has none) 1000 ×3, 1200 ×3 → 1100; gaps 890, 880, 870, 1050, 1040, 1030 → 960
    assert per["tiss_med_ns"] == pytest.approx(145.0) and per["tiss_p90_ns"] == pytest.approx(173.0)
    assert per["period_med_ns"] == pytest.approx(1100.0) and per["gap_meas_med_ns"] == pytest.approx(960.0)
    assert per["bursts_used"] == 4 and per["ns_per_cycle"] == pytest.approx(0.6)  # median of 0.5, 0.7
    # a_iso, bursts 1..7: issue 10..70 → median 40, p90 at rank 5.4: 64; periods 100 (×6); gaps 90, 80, …, 40 → 65
    assert iso["tiss_med_ns"] == pytest.approx(40.0) and iso["tiss_p90_ns"] == pytest.approx(64.0)
    assert iso["period_med_ns"] == pytest.approx(100.0) and iso["gap_meas_med_ns"] == pytest.approx(65.0)
    assert iso["bursts_used"] == 7 and iso["ns_per_cycle"] == pytest.approx(0.4)


def test_completion_rate_needs_eight_bursts_after_the_warmup():
    p = calibration_points(_probes(), _slices(), _dumps()).set_index("dump")
    # b_per: its 8 bursts after the warm-up, 100 B each, accepted at their ends
    ends = [b + d for c in (0, 1) for b, d in zip(PER_BEGIN[c][16:], PER_ISSUE[c][16:])]
    assert p.loc["b_per", "completion_rate_gbps"] == pytest.approx(completion_rate_gbps(np.array(ends, dtype=np.float64), PAYLOAD_BYTES))
    assert np.isnan(p.loc["a_iso", "completion_rate_gbps"])  # 7 bursts after its warm-up: no fit


def test_calibration_points_of_integer_dump_ids_without_a_store_column():
    probes = pd.DataFrame(_bursts(7, 0, ISO_BEGIN, ISO_ISSUE))
    dumps = pd.DataFrame([{"dump": 7, "mode": "isolated", "dest": "peer", "K": 1, "B": 64, "gap_ns": 0, "bursts": 8}])
    p = calibration_points(probes, pd.DataFrame({"dump": ["7"], "ns_per_cycle": [0.25]}), dumps)
    assert p["dump"].tolist() == ["7"] and p["store"].tolist() == ["stg"] and p["tiss_med_ns"].tolist() == [40.0]
    assert p["ns_per_cycle"].tolist() == [0.25]
    assert p["gap_ns"].dtype == np.float64 and p["completion_rate_gbps"].dtype == np.float64  # 7 bursts: NaN, still a float


def test_completion_rates_per_dump_by_hand():
    # "b": 8 bursts of 100 B accepted every 50 ns, "a": 9 every 25 ns, "c": 7 (too few for a fit). The middle half of
    # each (time order) lies on a line: 100 B / 50 ns = 2 GB/s and 100 / 25 = 4 GB/s; per dump in name order
    spans = pd.DataFrame({"dump": ["b"] * 8 + ["a"] * 9 + ["c"] * 7, "payload": 100.0,
                          "end": [50.0 * n for n in range(8)] + [25.0 * n for n in range(9)] + [10.0 * n for n in range(7)]})
    r = completion_rates(spans)
    assert r.index.tolist() == ["a", "b"] and r.tolist() == pytest.approx([4.0, 2.0]) and r.dtype == np.float64
    # without the bytes: no rate
    assert completion_rates(spans.drop(columns="payload")).isna().tolist() == [True, True]


def test_no_calibration_launch_gives_no_points():
    probes, slices = _probes(), _slices()
    assert calibration_points(probes, slices, pd.DataFrame()).empty
    assert calibration_points(probes, slices, _dumps().iloc[4:5]).empty  # only the fused launch
    assert calibration_points(probes, slices, _dumps().iloc[5:6]).empty  # only a launch without a gap
    assert calibration_points(probes[probes["event"] == "tile"], slices, _dumps()).empty  # no burst record
