"""Dashboard data shaping (app/shaping.py) against hand calculations on small frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("plotly")
from xstage_trace.app import shaping  # noqa: E402


def test_busy_fraction_per_lane_and_bin_by_hand():
    # lane 0: [-50, 25] fills bin 0 (0–25) and [30, 40] is 10 of bin 1's 25 ns
    # lane 1: [10, 90] covers 15/25, 1, 1, 15/25; [95, 300] adds 5/25 to the last bin
    s = pd.DataFrame({"sm_id": [0, 0, 1, 1], "start_ns": [-50, 30, 10, 95], "end_ns": [25, 40, 90, 300]})
    edges, lanes, frac = shaping.busy_fraction(s, 0, 100, 4)
    np.testing.assert_allclose(edges, [0, 25, 50, 75, 100])
    assert lanes.tolist() == [0, 1]
    np.testing.assert_allclose(frac, [[1.0, 0.4, 0.0, 0.0], [0.6, 1.0, 1.0, 0.8]])


def test_busy_fraction_ignores_spans_outside_the_window_and_sums_overlaps():
    s = pd.DataFrame({"sm_id": [3, 3, 3, 3], "start_ns": [-900, 500, 0, 0], "end_ns": [-800, 900, 50, 50]})
    _, lanes, frac = shaping.busy_fraction(s, 0, 100, 2)
    np.testing.assert_allclose(frac, [[2.0, 0.0]])  # two spans over all of bin 0; the others are outside


def test_binned_metrics_average_samples_per_bin_inside_the_window():
    gm = pd.DataFrame({"metric": ["SM Active"] * 5 + ["PCIe TX"] * 2,
                       "timestamp_ns": [0, 10, 20, 30, 200, 10, 20], "value": [10.0, 20.0, 30.0, 50.0, 99.0, 1.0, 3.0]})
    out = shaping.binned_metrics(gm, ["SM Active"], 0, 40, max_points=2)
    # bins of 20 ns: [0, 20) holds 10, 20 → 15; [20, 40] holds 30, 50 → 40; the sample at 200 is outside
    assert out["metric"].tolist() == ["SM Active", "SM Active"]
    np.testing.assert_allclose(out["value"], [15.0, 40.0])
    np.testing.assert_allclose(out["t_ns"], [5.0, 25.0])
    assert out["samples"].tolist() == [2, 2]


def test_kernel_summary_and_kernel_containing():
    k = pd.DataFrame({"name": ["a(int)", "a(int)", "b"], "short_name": ["a", "a", "b"],
                      "start_ns": [0, 100, 300], "end_ns": [50, 250, 310], "duration_ns": [50e6, 150e6, 10e6]})
    s = shaping.kernel_summary(k).set_index("kernel")
    assert s.loc["a", "launches"] == 2 and s.loc["a", "median_ms"] == 100.0 and s.loc["a", "total_ms"] == 200.0
    assert s.index[0] == "a"  # the most total time first
    assert shaping.kernel_containing(k, 120, 200)["start_ns"] == 100
    assert shaping.kernel_containing(k, 40, 120)["start_ns"] == 100  # overlaps the second launch most (20 > 10)
    assert shaping.kernel_containing(k, 260, 290) is None


def test_stall_agreement_by_hand():
    t = pd.DataFrame({"predicted_stall_ns": [0.0, 100.0, 300.0, np.nan], "measured_stall_ns": [10.0, 90.0, 400.0, 5.0]})
    a = shaping.stall_agreement(t)
    assert a["tiles"] == 3
    assert a["spearman"] == pytest.approx(1.0)  # same order
    assert a["median_abs_err_ns"] == 10.0 and a["mean_abs_err_ns"] == pytest.approx(40.0)


def test_scatter_sample_keeps_every_backpressured_tile_first():
    t = pd.DataFrame({"backpressured": [True] * 5 + [False] * 95, "x": range(100)})
    s = shaping.scatter_sample(t, max_points=20)
    assert len(s) == 20 and s["backpressured"].sum() == 5
    assert len(shaping.scatter_sample(t, max_points=200)) == 100


def test_group_quantiles_by_hand():
    t = pd.DataFrame({"wave": [0, 0, 0, 0, 1], "v": [1.0, 2.0, 3.0, 4.0, 7.0]})
    q = shaping.group_quantiles(t, "wave", "v").set_index("wave")
    assert q.loc[0, "median"] == 2.5 and q.loc[0, "p25"] == 1.75 and q.loc[0, "p75"] == 3.25
    assert q.loc[0, "min"] == 1.0 and q.loc[0, "max"] == 4.0 and q.loc[1, "tiles"] == 1


def test_backpressured_tiles_sorted_by_measured_stall_in_us():
    t = pd.DataFrame({"dump": ["d"] * 3, "cta": [1, 2, 3], "tile": [10, 20, 30], "backpressured": [True, False, True],
                      "measured_stall_ns": [1000.0, 9e9, 5000.0], "predicted_stall_ns": [0.0, 0.0, 4000.0]})
    b = shaping.backpressured_tiles(t)
    assert b["cta"].tolist() == [3, 1]
    assert b["measured_stall_us"].tolist() == [5.0, 1.0]


def test_span_categories_flag_backpressured_tiles_and_place_roles_on_lanes():
    spans = pd.DataFrame({"rank": 0, "dump": "d", "cta": [0, 0, 1, 0], "tile": [5, 5, 6, 5], "sm_id": [7, 7, 9, 7],
                          "role": [0, 1, 1, 0], "event": ["mainloop", "rs", "rs", "slot_wait"],
                          "start_ns": 0.0, "end_ns": 1.0, "duration_ns": 1.0})
    tiles = pd.DataFrame({"rank": 0, "dump": "d", "cta": [0, 1], "tile": [5, 6], "backpressured": [True, False],
                          "predicted_stall_ns": 0.0, "measured_stall_ns": 0.0})
    s = shaping.span_categories(spans, tiles)
    assert s["category"].tolist() == ["mainloop", "remote store (backpressured)", "remote store", "slot wait"]
    np.testing.assert_allclose(s["lane"], [7.2, 6.8, 8.8, 7.2])  # MMA role above its SM, epilogue below


def test_burst_sequence_and_guard_onset():
    b = pd.DataFrame({"burst": [1, 0, 2], "volume_bytes": [2 << 20, 1 << 20, 1 << 20], "gap_ns": [1000.0, 2000.0, np.nan],
                      "producers": 4, "rho": [2.0, 0.5, 1.0], "q_bytes": [0.0, 0.0, 3 << 20],
                      "b_iso_bytes": [1 << 20, 0.0, 2 << 20], "guard_ok": [True, True, False]})
    seq = shaping.burst_sequence(b, np.array([4 << 20] * 3, dtype=float))
    assert seq["burst"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(seq["volume_mib"], [1, 2, 1])
    np.testing.assert_allclose(seq["guard_lhs_mib"], [0, 1, 5])
    np.testing.assert_allclose(seq["gap_us"].iloc[:2], [2.0, 1.0])
    assert shaping.guard_onset(seq) == 2
    assert shaping.guard_onset(seq.assign(guard_ok=None)) is None  # no calibration: no guard


def test_window_around_pads_and_clips():
    assert shaping.window_around(100, 200, 0, 1000) == (75, 225)
    assert shaping.window_around(100, 200, 90, 210) == (90, 210)
    assert shaping.window_around(100, 200, 0, 1000, pad_frac=1.0) == (0, 300)


def test_with_config_names_configurations_and_adds_the_variant_only_when_several():
    t = pd.DataFrame({"dump": ["a", "b"], "dest": "host", "shape": "S1", "schedule": "wave", "variant": ["split/smem/tma"] * 2})
    assert shaping.with_config(t)["config"].tolist() == ["host S1 wave"] * 2
    t2 = t.assign(variant=["split/smem/tma", "split/smem/stg"])
    assert shaping.with_config(t2)["config"].tolist() == ["host S1 wave split/smem/tma", "host S1 wave split/smem/stg"]
