"""Burst reconstruction's offered gap and the per-sequence §4 audit, on small hand-made inputs whose
answers are worked out by hand (analysis/bursts.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.bursts import audit_bursts, reconstruct_bursts
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.recurrence import audit_sequence


def _spans(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["rank", "dump", "cta", "tile", "start_ns", "end_ns", "bytes"])


def test_offered_gap_sums_the_mainloops_after_the_stored_tile_through_the_next_stored_one():
    # CTA 0 runs tiles 0-4 (mainloops 10..50 ns) and stores after tiles 1 and 3; CTA 1 runs tiles
    # 10-12 (100, 200, 300 ns) and stores after 10 and 12. Tile rows are given out of order.
    tiles = pd.DataFrame({
        "rank": [0] * 8, "dump": ["d"] * 8,
        "cta": [1, 0, 0, 1, 0, 0, 1, 0], "tile": [12, 3, 0, 10, 4, 1, 11, 2], "position": [2, 3, 0, 0, 4, 1, 1, 2],
        "mainloop_ns": [300.0, 40.0, 10.0, 100.0, 50.0, 20.0, 200.0, 30.0],
    })
    spans = _spans([(0, "d", 0, 1, 100.0, 150.0, 64), (0, "d", 0, 3, 400.0, 460.0, 64),
                    (0, "d", 1, 10, 120.0, 200.0, 32), (0, "d", 1, 12, 900.0, 950.0, 32)])
    b = reconstruct_bursts(spans, tiles)
    # burst 0: CTA 0 offers tiles 2 + 3 (30 + 40 = 70 ns), CTA 1 tiles 11 + 12 (200 + 300 = 500 ns): median 285
    # burst 1: both producers' last store, no successor: unbounded (NaN)
    assert b["burst"].tolist() == [0, 1]
    assert b["gap_ns"].iloc[0] == 285.0 and np.isnan(b["gap_ns"].iloc[1])
    assert b["volume_bytes"].tolist() == [96, 96] and b["producers"].tolist() == [2, 2]
    assert b[["start_ns", "end_ns"]].values.tolist() == [[100.0, 200.0], [400.0, 950.0]]


def test_offered_gap_of_a_store_on_a_tile_the_tile_table_lacks_is_unknown():
    tiles = pd.DataFrame({"rank": [0, 0], "dump": ["d", "d"], "cta": [0, 0], "tile": [0, 1], "position": [0, 1],
                          "mainloop_ns": [10.0, 20.0]})
    spans = _spans([(0, "d", 0, 0, 0.0, 5.0, 8), (0, "d", 0, 7, 50.0, 55.0, 8), (0, "d", 0, 1, 90.0, 95.0, 8)])
    b = reconstruct_bursts(spans, tiles)
    assert np.isnan(b["gap_ns"]).all()  # 0 → 7 and 7 → 1 both need tile 7's place; 1 is the last store


def test_each_dump_is_audited_as_its_own_sequence():
    # two dumps' bursts interleaved in row order; each must be audited as if it were alone
    model = PlatformModel(rate_gbps=1.0, issue_floor_ns={(2, 1000): 500.0}, capacity_by_producers={2: 1500.0})
    bursts = pd.DataFrame({
        "rank": [0, 0, 0, 0, 0], "dump": ["a", "b", "a", "b", "a"], "burst": [0, 0, 1, 1, 2],
        "volume_bytes": [2000, 2000, 2000, 2000, 2000], "producers": [2] * 5,
        "gap_ns": [500.0, 3000.0, 800.0, np.nan, np.nan],
    })
    out = audit_bursts(bursts, model)
    for dump, gaps in (("a", [500.0, 800.0, np.inf]), ("b", [3000.0, np.inf])):
        rows = out[out["dump"] == dump]
        want = audit_sequence([2000.0] * len(gaps), gaps, 500.0, 1.0, None).table
        for c in ("rho", "delta_b_bytes", "q_bytes", "b_iso_bytes"):
            np.testing.assert_allclose(rows[c].to_numpy(), want[c].to_numpy(), err_msg=f"{dump} {c}")
        assert rows["guard_ok"].tolist() == ((want["q_bytes"] + want["b_iso_bytes"]) <= 1500.0).tolist()
    assert (out["issue_floor_ns"] == 500.0).all()
    # dump a by hand (1 B/ns drain, 500 ns issue floor): Δb_0 = 2000 − (500 + 500) = 1000 B left before burst 1,
    # Δb_1 = 2000 − (500 + 800) = 700 more before burst 2; b_iso = 2000 − 500 = 1500 B, so only burst 0 fits Q = 1500 B
    a = out[out["dump"] == "a"]
    assert a["q_bytes"].tolist() == pytest.approx([0.0, 1000.0, 1700.0])
    assert a["guard_ok"].tolist() == [True, False, False]


def test_no_calibration_leaves_the_audit_columns_empty():
    bursts = pd.DataFrame({"rank": [0], "dump": ["a"], "burst": [0], "volume_bytes": [10], "producers": [1], "gap_ns": [np.nan]})
    out = audit_bursts(bursts, None)
    assert out[["issue_floor_ns", "rho", "delta_b_bytes", "q_bytes", "b_iso_bytes"]].isna().all().all()
    assert out["guard_ok"].isna().all()


def test_audit_uses_the_rate_of_each_bursts_configuration():
    """A version-3 calibration predicts with R(K, B): the audit's ρ of a 2 × 1000-byte burst is
    V / (R(2, 1000) · (T0 + G)) = 2000 / (2 · (500 + 500)) = 1.0, not the pooled R's 2000 / (1 · 1000) = 2.0."""
    from xstage_trace.analysis.calibration_fit import CalibratedPlatform

    model = CalibratedPlatform(1.0, {(2, 1000): 500.0}, None, 0.0, "", "host", {2: 1.0}, {(2, 1000): 2.0})
    bursts = pd.DataFrame({"rank": [0, 0], "dump": ["a", "a"], "burst": [0, 1], "volume_bytes": [2000, 2000],
                           "producers": [2, 2], "gap_ns": [500.0, np.nan]})
    out = audit_bursts(bursts, model)
    assert out["rho"].iloc[0] == pytest.approx(1.0)
    assert out["delta_b_bytes"].iloc[0] == pytest.approx(0.0)  # 2000 − 2 · (500 + 500)
