"""The verdict rule (analysis/verdict.py, docs/model.md §12), the burst reconstruction (analysis/bursts.py, §1/§4)
and the link what-if (analysis/link_whatif.py, §13) on small hand-made inputs whose answers are worked out by hand
in the comments (docs/mutation.md: written against the mutants the tile-table tests let through)."""

from __future__ import annotations

import numpy as np
import pandas as pd

import pytest

from xstage_trace.analysis.bursts import audit_bursts, reconstruct_bursts, remote_store_spans
from xstage_trace.analysis.forward import LinkModel, forward_launch
from xstage_trace.analysis.link_whatif import (RUN_COLUMNS, _median_stall, launch_whatifs, link_floor_ns, prefetch_lag_ns,
                                               redistributed, run_whatifs)
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.verdict import VERDICT_COLUMNS, config_verdicts, stall_verdict

# ---------------------------------------------------------------- §12 verdict per configuration

NAN = np.nan


def _table3(rows: list[dict]) -> pd.DataFrame:
    """Table 3 rows (docs/model.md §12) keyed by variant; the other keys fixed."""
    return pd.DataFrame([{"dest": "host", "shape": "s", "schedule": "wave", **r} for r in rows])


def test_stall_verdict_reads_none_as_not_measured_and_not_predicted():
    # measured None, predicted 300 > 200 → stall; nothing → unknown; measured 100 ≤ 200 → no stall
    got = stall_verdict([None, None, 100.0], [300.0, None, None], 200.0)
    assert got.tolist() == ["stall", "unknown", "no stall"]


def test_a_prediction_equal_to_the_noise_without_a_measurement_is_unknown():
    # not measured, prediction 200 is not above the noise 200 (§5: "exceeds") → unknown, never stall
    assert stall_verdict([NAN], [200.0], 200.0).tolist() == ["unknown"]


# noise 300 ns everywhere (not the 200 ns minimum, which a lost noise column would fall back to).
# tiles, measured_tiles, stalled_tiles; medians: stall_ns (Δt_meas), slot_meas_ns (w_meas), compute_stall_ns (c_meas).
_ROWS = [
    # A: median 250 ≤ 300 and 1 of 4 measured tiles stalled (25 %, not more than a quarter) → covered, cause none.
    #    prediction 100 (slot model; no forward) ≤ 300 and measurement ≤ 300: the model agrees.
    dict(variant="A", tiles=8, measured_tiles=4, stalled_tiles=1, stall_ns=250.0, slot_meas_ns=250.0, compute_stall_ns=0.0,
         forward_stall_ns=NAN, slot_pred_ns=100.0, backpressured_tiles=1, inflated_tiles=0, noise_ns=300.0,
         stall_p99_ns=900.0, kernel_ns=10_000.0),
    # B: median 0 but 1 of the 2 measured tiles stalled (50 % > 25 %; of all 8 tiles it would be 12.5 %) → stall-bound;
    #    slot 0 and compute 0 ≤ 300, inflated 1 = backpressured 1 (not larger) → slot_backpressure.
    #    prediction 0 ≤ 300, measurement 0 ≤ 300: agrees.
    dict(variant="B", tiles=8, measured_tiles=2, stalled_tiles=1, stall_ns=0.0, slot_meas_ns=0.0, compute_stall_ns=0.0,
         forward_stall_ns=NAN, slot_pred_ns=0.0, backpressured_tiles=1, inflated_tiles=1, noise_ns=300.0,
         stall_p99_ns=800.0, kernel_ns=11_000.0),
    # C: median 700 > 300 → stall-bound; slot 300 is not above 300, compute 400 is → mainloop_inflation
    #    (although backpressured 3 > inflated 0). prediction 300 (= noise, not above) vs measured 700 (above): disagrees.
    dict(variant="C", tiles=4, measured_tiles=4, stalled_tiles=3, stall_ns=700.0, slot_meas_ns=300.0, compute_stall_ns=400.0,
         forward_stall_ns=NAN, slot_pred_ns=300.0, backpressured_tiles=3, inflated_tiles=0, noise_ns=300.0,
         stall_p99_ns=700.0, kernel_ns=12_000.0),
    # D: median 800 > 300; slot 400 > 300 → slot_backpressure (although compute 400 > 300 and inflated 3 > 1).
    #    forward prediction 500 > 300 and measurement > 300: agrees.
    dict(variant="D", tiles=4, measured_tiles=4, stalled_tiles=4, stall_ns=800.0, slot_meas_ns=400.0, compute_stall_ns=400.0,
         forward_stall_ns=500.0, slot_pred_ns=0.0, backpressured_tiles=1, inflated_tiles=3, noise_ns=300.0,
         stall_p99_ns=1200.0, kernel_ns=13_000.0),
    # E: median 500 > 300; slot 0, compute 300 (not above 300), inflated 0 < backpressured 2 → slot_backpressure.
    #    measured, no prediction at all: model_agrees None.
    dict(variant="E", tiles=4, measured_tiles=4, stalled_tiles=2, stall_ns=500.0, slot_meas_ns=0.0, compute_stall_ns=300.0,
         forward_stall_ns=NAN, slot_pred_ns=NAN, backpressured_tiles=2, inflated_tiles=0, noise_ns=300.0,
         stall_p99_ns=600.0, kernel_ns=14_000.0),
    # F: median 0, 2 of 4 stalled (50 %) → stall-bound; slot 0, compute 0, inflated 3 > backpressured 1 → mainloop_inflation.
    #    measured 0 vs predicted 300 (= noise, not above): both not above → agrees.
    dict(variant="F", tiles=4, measured_tiles=4, stalled_tiles=2, stall_ns=0.0, slot_meas_ns=0.0, compute_stall_ns=0.0,
         forward_stall_ns=300.0, slot_pred_ns=NAN, backpressured_tiles=1, inflated_tiles=3, noise_ns=300.0,
         stall_p99_ns=500.0, kernel_ns=15_000.0),
    # G: nothing measured; forward 400 > 300 (the slot model's 100 would not be) → stall-bound on the prediction,
    #    cause from the counts: inflated 0, backpressured 0 → slot_backpressure. model_agrees None (no measurement).
    dict(variant="G", tiles=4, measured_tiles=0, stalled_tiles=0, stall_ns=NAN, slot_meas_ns=NAN, compute_stall_ns=NAN,
         forward_stall_ns=400.0, slot_pred_ns=100.0, backpressured_tiles=0, inflated_tiles=0, noise_ns=300.0,
         stall_p99_ns=NAN, kernel_ns=16_000.0),
    # H: nothing measured and nothing predicted → unknown, basis none, cause none.
    dict(variant="H", tiles=4, measured_tiles=0, stalled_tiles=0, stall_ns=NAN, slot_meas_ns=NAN, compute_stall_ns=NAN,
         forward_stall_ns=NAN, slot_pred_ns=NAN, backpressured_tiles=0, inflated_tiles=0, noise_ns=300.0,
         stall_p99_ns=NAN, kernel_ns=17_000.0),
    # I: median 300 = noise (not above), 0 stalled → covered; prediction 0: both not above → agrees.
    dict(variant="I", tiles=4, measured_tiles=4, stalled_tiles=0, stall_ns=300.0, slot_meas_ns=300.0, compute_stall_ns=0.0,
         forward_stall_ns=NAN, slot_pred_ns=0.0, backpressured_tiles=0, inflated_tiles=0, noise_ns=300.0,
         stall_p99_ns=300.0, kernel_ns=18_000.0),
]


def _by_variant():
    return config_verdicts(_table3(_ROWS)).set_index("variant")


def test_verdicts_of_hand_made_table3_rows():
    v = _by_variant()
    assert v["verdict"].to_dict() == {"A": "covered", "B": "stall-bound", "C": "stall-bound", "D": "stall-bound",
                                      "E": "stall-bound", "F": "stall-bound", "G": "stall-bound", "H": "unknown",
                                      "I": "covered"}
    assert v["basis"].to_dict() == {**{k: "measured" for k in "ABCDEFI"}, "G": "predicted", "H": "none"}


def test_diagnosis_of_hand_made_table3_rows():
    v = _by_variant()
    assert v["diagnosis"].to_dict() == {"A": "none", "B": "slot_backpressure", "C": "mainloop_inflation",
                                        "D": "slot_backpressure", "E": "slot_backpressure", "F": "mainloop_inflation",
                                        "G": "slot_backpressure", "H": "none", "I": "none"}


def test_model_agrees_of_hand_made_table3_rows():
    v = _by_variant()
    assert v["model_agrees"].to_dict() == {"A": True, "B": True, "C": False, "D": True, "E": None, "F": True,
                                           "G": None, "H": None, "I": True}


def test_verdict_table_carries_the_table3_quantities_under_its_own_names():
    v = _by_variant()
    rows = {r["variant"]: r for r in _ROWS}
    for name, t3 in [("measured_stall_ns", "stall_ns"), ("measured_stall_p99_ns", "stall_p99_ns"),
                     ("slot_stall_ns", "slot_meas_ns"), ("compute_stall_ns", "compute_stall_ns"),
                     ("slot_model_stall_ns", "slot_pred_ns"), ("predicted_stall_ns", "forward_stall_ns"),
                     ("kernel_ns", "kernel_ns"), ("noise_ns", "noise_ns"), ("tiles", "tiles"), ("stalled_tiles", "stalled_tiles")]:
        np.testing.assert_array_equal(v[name].to_numpy(np.float64), [rows[k][t3] for k in v.index], err_msg=name)


def test_verdict_table_has_exactly_its_columns_and_a_fresh_index():
    t = _table3(_ROWS[:2])
    t.index = [7, 3]  # a filtered Table 3 keeps its old labels
    v = config_verdicts(t)
    assert list(v.columns) == VERDICT_COLUMNS and v.index.tolist() == [0, 1]
    assert v["variant"].tolist() == ["A", "B"]


def test_a_table3_without_optional_columns_uses_all_tiles_and_the_minimum_noise():
    # no measured_tiles (the share is over all tiles), no noise (200 ns, analysis/tiles.MIN_NOISE_NS), no forward
    # prediction, no backpressured/inflated counts.
    # x: median 0, 2 of 4 tiles stalled (50 %) → stall-bound; slot 0, compute 0, no counts → slot_backpressure.
    # y: median 150 ≤ 200, 0 of 4 stalled → covered.
    t = _table3([dict(variant="x", tiles=4, stalled_tiles=2, stall_ns=0.0, slot_meas_ns=0.0, compute_stall_ns=0.0, slot_pred_ns=0.0),
                 dict(variant="y", tiles=4, stalled_tiles=0, stall_ns=150.0, slot_meas_ns=0.0, compute_stall_ns=0.0, slot_pred_ns=0.0)])
    v = config_verdicts(t).set_index("variant")
    assert v["verdict"].to_dict() == {"x": "stall-bound", "y": "covered"}
    assert v.loc["x", "diagnosis"] == "slot_backpressure" and v["noise_ns"].tolist() == [200.0, 200.0]
    assert np.isnan(v["predicted_stall_ns"]).all()


def test_a_forward_column_of_none_falls_back_to_the_slot_model():
    # nothing measured; forward prediction None (an object column) → the slot model's 400 > 300 → stall-bound, predicted
    t = _table3([dict(variant="z", tiles=2, measured_tiles=0, stalled_tiles=0, stall_ns=NAN, slot_pred_ns=400.0,
                      forward_stall_ns=None, noise_ns=300.0)])
    assert t["forward_stall_ns"].dtype == object
    v = config_verdicts(t).iloc[0]
    assert v["verdict"] == "stall-bound" and v["basis"] == "predicted"


# ---------------------------------------------------------------- §1/§4 burst reconstruction

BURST_COLUMNS = ["rank", "dump", "burst", "start_ns", "end_ns", "volume_bytes", "producers", "issue_ns", "gap_ns"]


def _spans(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["rank", "dump", "cta", "tile", "start_ns", "end_ns", "bytes"])


def test_remote_store_spans_pair_begin_and_end_per_slice_and_keep_the_end_payload():
    # rank 0, dump 7: CTA 0 slice 0 tile 1: rs begin 100, end 160 (payload 64 on the end record);
    # CTA 0 slice 1 tile 1: burst begin 110, end 130 (payload 32); a mainloop pair is not a remote store.
    rec = [  # rank, dump, slice, cta, event, tile, kind, t_ns, payload
        (0, 7, 0, 0, "rs", 1, "begin", 100, 0), (0, 7, 1, 0, "burst", 1, "begin", 110, 0),
        (0, 7, 0, 0, "mainloop", 1, "begin", 0, 0), (0, 7, 0, 0, "mainloop", 1, "end", 90, 5),
        (0, 7, 1, 0, "burst", 1, "end", 130, 32), (0, 7, 0, 0, "rs", 1, "end", 160, 64)]
    probes = pd.DataFrame(rec, columns=["rank", "dump", "slice", "cta", "event", "tile", "kind", "t_ns", "payload"])
    s = remote_store_spans(probes).sort_values("start_ns").reset_index(drop=True)
    assert list(s.columns) == ["rank", "dump", "slice", "cta", "event", "tile", "start_ns", "end_ns", "bytes"]
    assert s["event"].tolist() == ["rs", "burst"] and s["slice"].tolist() == [0, 1]
    assert s["start_ns"].tolist() == [100, 110] and s["end_ns"].tolist() == [160, 130] and s["bytes"].tolist() == [64, 32]
    assert s["dump"].tolist() == ["7", "7"]  # the dump as text, as every other table keys it


def test_no_spans_give_an_empty_burst_table_with_its_columns():
    b = reconstruct_bursts(_spans([]))
    assert b.empty and list(b.columns) == BURST_COLUMNS


def test_without_a_tile_table_the_gap_is_the_producers_own_idle_time_clipped_at_zero():
    # CTA 0 stores [0, 100], [150, 200], [500, 600]; CTA 1 stores [10, 120], [100, 180] (begins before its
    # previous store ends: idle −20 → 0), [400, 450].
    # round 0: gaps CTA 0 150 − 100 = 50, CTA 1 0 → median 25; round 1: CTA 0 500 − 200 = 300, CTA 1 400 − 180 = 220
    # → median 260; round 2: no successor → NaN. issue = latest end − earliest begin: 120 − 0, 200 − 100, 600 − 400.
    spans = _spans([(0, "d", 0, 0, 0.0, 100.0, 10), (0, "d", 0, 1, 150.0, 200.0, 10), (0, "d", 0, 2, 500.0, 600.0, 10),
                    (0, "d", 1, 0, 10.0, 120.0, 5), (0, "d", 1, 1, 100.0, 180.0, 5), (0, "d", 1, 2, 400.0, 450.0, 5)])
    b = reconstruct_bursts(spans, None)
    assert b["burst"].tolist() == [0, 1, 2]
    np.testing.assert_array_equal(b["gap_ns"].to_numpy(), [25.0, 260.0, np.nan])
    assert b["issue_ns"].tolist() == [120.0, 100.0, 200.0]
    assert b["volume_bytes"].tolist() == [15, 15, 15] and b["producers"].tolist() == [2, 2, 2]


def test_a_gap_of_exactly_zero_stays_zero():
    # one CTA: [0, 100] then [100, 150]: idle 0 → gap 0 (not clipped up to anything); last round NaN
    b = reconstruct_bursts(_spans([(0, "d", 0, 0, 0.0, 100.0, 8), (0, "d", 0, 1, 100.0, 150.0, 8)]))
    np.testing.assert_array_equal(b["gap_ns"].to_numpy(), [0.0, np.nan])


def test_ranks_and_dumps_of_the_same_name_and_cta_are_separate_producers_and_rounds():
    # CTA 0 stores once in each of (rank 0, dump d), (rank 1, dump d), (rank 1, dump e) (neighbours in sorted order
    # differ in the rank alone, then in the dump alone): three sequences of one round each: burst 0 three times,
    # each its own V, start, end, and no successor (gap NaN).
    spans = _spans([(1, "e", 0, 0, 200.0, 260.0, 20), (0, "d", 0, 0, 0.0, 100.0, 10), (1, "d", 0, 0, 300.0, 350.0, 30)])
    b = reconstruct_bursts(spans)
    assert b[["rank", "dump"]].values.tolist() == [[0, "d"], [1, "d"], [1, "e"]]
    assert b["burst"].tolist() == [0, 0, 0] and b["volume_bytes"].tolist() == [10, 30, 20]
    assert b["issue_ns"].tolist() == [100.0, 50.0, 60.0] and np.isnan(b["gap_ns"]).all()


def test_offered_gaps_do_not_run_from_one_ranks_or_dumps_producer_into_another():
    # CTA 0 of (rank 0, dump d), (rank 1, dump d) and (rank 1, dump e) each runs tiles 0, 1 (mainloops 10, 20 ns)
    # and stores only after tile 0: every store is its producer's last → the offered gap is unbounded (NaN).
    keys = [(0, "d"), (1, "d"), (1, "e")]
    tiles = pd.DataFrame([(r, d, 0, t, t, 10.0 * (t + 1)) for r, d in keys for t in (0, 1)],
                         columns=["rank", "dump", "cta", "tile", "position", "mainloop_ns"])
    spans = _spans([(r, d, 0, 0, 100.0 * i, 100.0 * i + 5, 8) for i, (r, d) in enumerate(keys)])
    b = reconstruct_bursts(spans, tiles)
    assert len(b) == 3 and np.isnan(b["gap_ns"]).all()


def test_offered_gaps_match_tiles_to_stores_by_dump_name_when_the_tiles_hold_a_dump_without_stores():
    # dump "b", CTA 0 runs tiles 10, 11, 12, 13 (mainloops 100, 200, 300, 400 ns) and stores after 10 and 12: the first
    # store's offered gap is the mainloops after tile 10 through tile 12, 200 + 300 = 500 ns; the second is the last (NaN).
    # The tiles also hold dump "a" (sorted before "b"), which stores nothing: the dump names are coded as one column
    # across spans and tiles, else "b" of the spans (code 0 of its own) would meet "a" of the tiles.
    tiles = pd.DataFrame([("a", 10, 0, 1000.0), ("a", 11, 1, 2000.0)] + [("b", 10 + i, i, 100.0 * (i + 1)) for i in range(4)],
                         columns=["dump", "tile", "position", "mainloop_ns"]).assign(rank=0, cta=0)
    spans = _spans([(0, "b", 0, 10, 0.0, 50.0, 8), (0, "b", 0, 12, 700.0, 750.0, 8)])
    b = reconstruct_bursts(spans, tiles)
    np.testing.assert_array_equal(b["gap_ns"].to_numpy(), [500.0, np.nan])


def test_a_tile_table_holding_a_tile_twice_is_refused():
    tiles = pd.DataFrame({"rank": [0, 0], "dump": ["d", "d"], "cta": [0, 0], "tile": [0, 0], "position": [0, 1],
                          "mainloop_ns": [10.0, 20.0]})
    with pytest.raises(ValueError, match=r"^the tile table holds a \(rank, dump, cta, tile\) twice$"):
        reconstruct_bursts(_spans([(0, "d", 0, 0, 0.0, 5.0, 8)]), tiles)


def test_audit_floor_is_read_at_each_bursts_producers_and_bytes_per_producer():
    # T_iss^0 points (K, B) → ns: (1, 1000) 100, (1, 2000) 200, (2, 1000) 500, (2, 2000) 900.
    # dump a: one producer storing 2000 B → B = 2000 → 200 ns; dump b: two producers, 2000 B → B = 1000 → 500 ns.
    model = PlatformModel(rate_gbps=1.0, issue_floor_ns={(1, 1000): 100.0, (1, 2000): 200.0, (2, 1000): 500.0, (2, 2000): 900.0})
    bursts = pd.DataFrame({"rank": [0, 0], "dump": ["a", "b"], "burst": [0, 0], "volume_bytes": [2000, 2000],
                           "producers": [1, 2], "gap_ns": [np.nan, np.nan]})
    out = audit_bursts(bursts, model)
    assert out["issue_floor_ns"].tolist() == [200.0, 500.0]


# ---------------------------------------------------------------- §13 link what-if

LINK = LinkModel(rate_gbps=50.0, capacity_bytes=0.0, load_latency_ns=0.0)  # 1000 B take 20 ns on the link


def test_link_floor_skips_unknown_bytes():
    # Eq. 49 over the known bytes: (1000 + 500) / 50 = 30 ns
    assert link_floor_ns([1000.0, np.nan, 500.0], LINK) == 30.0


def test_redistribution_deals_tiles_in_position_then_cta_order():
    # Eq. 50: run order (position, then CTA): (c0 p0) g0, (c1 p0) g1, (c0 p1) g2, (c1 p1) g3; K' = 3:
    # CTA g mod 3 = 0, 1, 2, 0 and position g // 3 = 0, 0, 0, 1; rows given as c0p0, c0p1, c1p0, c1p1 → g 0, 2, 1, 3
    c, p = redistributed([0, 0, 1, 1], [0, 1, 0, 1], 3)
    assert c.tolist() == [0, 2, 1, 0] and p.tolist() == [0, 0, 0, 1]
    assert c.dtype.kind == "i" and p.dtype.kind == "i"  # indices, as forward_launch reads them


def test_prefetch_lag_by_hand():
    # Eq. 51: L = −(C_prev − λ + E_prev), 0 for a CTA's first tile; λ = 5. Rows out of order.
    # CTA 0 (positions 0, 1, 2): C = 10, 20, 30, E = 1, 2, 3 → L = 0, −(10 − 5 + 1) = −6, −(20 − 5 + 2) = −17
    # CTA 1 (positions 0, 1): C = 40, 50, E = 4, 5 → L = 0, −(40 − 5 + 4) = −39
    model = LinkModel(rate_gbps=50.0, capacity_bytes=0.0, load_latency_ns=5.0)
    cta, pos = [1, 0, 0, 1, 0], [1, 2, 0, 0, 1]
    lag = prefetch_lag_ns(cta, pos, [50.0, 30.0, 10.0, 40.0, 20.0], [5.0, 3.0, 1.0, 4.0, 2.0], model)
    assert lag.tolist() == [-39.0, -17.0, 0.0, 0.0, -6.0]
    # a previous tile shorter than λ: C − λ + E < 0 → no lag (never later than as run)
    short = LinkModel(rate_gbps=50.0, capacity_bytes=0.0, load_latency_ns=100.0)
    assert prefetch_lag_ns([0, 0], [0, 1], 10.0, 1.0, short).tolist() == [0.0, 0.0]


def test_median_stall_of_no_finite_value_is_nan():
    assert np.isnan(_median_stall([np.nan, np.nan]))
    assert _median_stall([np.nan, 10.0, 30.0]) == 20.0


def test_default_cta_counts_are_a_half_a_quarter_and_an_eighth_and_the_fastest_is_kept():
    # 8 CTAs, one 1000-byte tile each, compute 10 ns: as run every store is issued at 10, the link serves them back
    # to back: last drain 10 + 8·20 = 170 ns; no tile waits (position 0). K' ∈ {4, 2, 1}:
    # K' = 4: round 0 stores at 10 drain by 90; round 1's loads (issued at 10) wait for them: compute 90..100,
    #         stores drain 100 + 4·20 = 180; tiles of position 1 stall 100 − 10 − 10 = 80: median of (0 ×4, 80 ×4) = 40.
    # K' = 2: rounds end at 50, 100, 150, 200 → 200; K' = 1: a store every 30 ns, last issued at 220 → 240.
    # Kept: K' = 4 (180 ns). Prefetch: every CTA's only tile is its first (L = 0): as run. Floor 8000 / 50 = 160 ns.
    t = launch_whatifs(np.arange(8), np.zeros(8, int), 1000.0, 10.0, LINK).set_index("alternative")
    assert t.index.tolist() == ["as_run", "sm_count", "prefetch", "link_floor"]
    assert t["parameter"].iloc[:3].tolist() == [8.0, 4.0, 1.0] and np.isnan(t.loc["link_floor", "parameter"])
    assert t["kernel_ns"].tolist() == [170.0, 180.0, 170.0, 160.0]
    assert t["stall_ns"].iloc[:3].tolist() == [0.0, 40.0, 0.0] and np.isnan(t.loc["link_floor", "stall_ns"])
    assert t["gain"].tolist() == [1.0, 170.0 / 180.0, 1.0, 170.0 / 160.0]


def test_cta_options_outside_one_to_k_minus_one_are_dropped_and_ties_keep_the_fewest():
    # 2 CTAs: K' = 2 (= K) and 0 are not alternatives; K' = 1 twice is one option (the set) → one sm_count row.
    t = launch_whatifs([0, 1], [0, 0], 1000.0, 10.0, LINK, ctas_options=[0, 1, 1, 2, 3]).set_index("alternative")
    assert t.index.tolist() == ["as_run", "sm_count", "prefetch", "link_floor"] and t.loc["sm_count", "parameter"] == 1.0
    # K' = 1: one CTA, store at 10 drains at 30; the second tile waits: 30..40, drains at 60 → 60 ns
    assert t.loc["sm_count", "kernel_ns"] == 60.0
    # a tie: 4 CTAs of zero-byte tiles, compute 10 ns each (the kernel is the last compute end)
    z = launch_whatifs([0, 1, 2, 3], [0, 0, 0, 0], 0.0, 10.0, LINK, ctas_options=[2, 3]).set_index("alternative")
    # K' = 2: 2 positions → the last compute ends at 20; K' = 3: also 2 positions (tiles 0-2, then 3) → 20: a tie, the
    # first (fewer CTAs, sorted) is kept
    assert z.loc["sm_count", "parameter"] == 2.0 and z.loc["sm_count", "kernel_ns"] == 20.0


def _wired(plain_store, **kw):
    """Every alternative is forward_launch of its inputs (§13): a 3-CTA launch of two tiles each, with an epilogue,
    two load steps in one stage and a buffer wait."""
    model = LinkModel(rate_gbps=50.0, capacity_bytes=400.0, load_latency_ns=4.0, issue_floor_ns=2.0)
    cta, pos = np.array([0, 0, 1, 1, 2, 2]), np.array([0, 1, 0, 1, 0, 1])
    nbytes = np.array([1000.0, 500.0, 800.0, 200.0, 600.0, 400.0])
    compute = np.array([10.0, 20.0, 15.0, 5.0, 12.0, 8.0])
    got = launch_whatifs(cta, pos, nbytes, compute, model, epilogue_ns=3.0, ctas_options=[2], plain_store=plain_store,
                         **kw).set_index("alternative")
    return got, (cta, pos, nbytes, compute, model)


@pytest.mark.parametrize("plain_store", [False, True])
def test_every_alternative_is_the_forward_prediction_of_its_inputs(plain_store):
    got, (cta, pos, nbytes, compute, model) = _wired(plain_store, steps=2, stages=1, cover_tiles=1)
    kw = dict(epilogue_ns=3.0, steps=2, stages=1, cover_tiles=1, plain_store=plain_store)

    def row(c, p, **extra):
        f, stall = forward_launch(c, p, nbytes, compute, model, **kw, **extra)
        return f.kernel_ns, float(np.nanmedian(stall))

    # Eq. 50 with K' = 2 by hand: run order (position, CTA) g = c0p0 0, c1p0 1, c2p0 2, c0p1 3, c1p1 4, c2p1 5;
    # rows (c0p0, c0p1, c1p0, c1p1, c2p0, c2p1) → g 0, 3, 1, 4, 2, 5 → CTA g mod 2, position g // 2
    want = {"as_run": row(cta, pos), "sm_count": row([0, 1, 1, 0, 0, 1], [0, 1, 0, 2, 1, 2]),
            # Eq. 51 by hand, C + E = 13, 23, 18, 8, 15, 11, λ = 4: L = 0, −(13 − 4), 0, −(18 − 4), 0, −(15 − 4)
            "prefetch": row(cta, pos, load_lag_ns=np.array([0.0, -9.0, 0.0, -14.0, 0.0, -11.0]))}
    for alt, (kernel, stall) in want.items():
        assert got.loc[alt, "kernel_ns"] == kernel and got.loc[alt, "stall_ns"] == stall, alt
        assert got.loc[alt, "gain"] == want["as_run"][0] / kernel
    assert got.loc["as_run", "parameter"] == 3.0 and got.loc["sm_count", "parameter"] == 2.0
    assert got.loc["prefetch", "parameter"] == 1.0 and got.loc["link_floor", "kernel_ns"] == 3500.0 / 50.0


def test_default_steps_and_buffer_wait_are_one_step_and_none():
    got, (cta, pos, nbytes, compute, model) = _wired(False, stages=1)
    f, stall = forward_launch(cta, pos, nbytes, compute, model, epilogue_ns=3.0, steps=1, stages=1, cover_tiles=0,
                              load_lag_ns=np.array([0.0, -9.0, 0.0, -14.0, 0.0, -11.0]))
    assert got.loc["prefetch", "kernel_ns"] == f.kernel_ns and got.loc["prefetch", "stall_ns"] == float(np.nanmedian(stall))


def _launch_tiles(dump, n_cta, rs_bytes, compute, **cols):
    return pd.DataFrame({"rank": 0, "dump": dump, "cta": np.arange(n_cta), "position": 0, "rs_bytes": rs_bytes,
                         "control_compute_ns": compute, "dest": "host", "shape": "s", "variant": "v", "schedule": "wave", **cols})


def test_run_whatifs_medians_over_the_configurations_eligible_launches_by_hand():
    # R = 50 B/ns, λ = 0, one tile per CTA (position 0: no load waits for a store).
    # config s: d1: 1000 B, C 10 → store at 10, drained 30: kernel 30, stall 0, floor 20;
    #           d2: 2000 B, C 20, epilogue 5, plain stores → store at 25, drained 65: kernel 65, stall 65 − 25 = 40, floor 40.
    #           medians: as_run/prefetch kernel 47.5, stall 20, gain 1; floor 30, gain median(1.5, 1.625) = 1.5625.
    #           d3 (a control), d4 (operands in shared memory), d5 (no offered compute), d6 (no bytes) do not count.
    # config t (variant unknown → "-"): d7: 2 CTAs × 1000 B, C 10: both stores at 10, drained 30, 50 → kernel 50, stall 0;
    #           K' = 1: second tile waits for 30: 30..40, drained 60 → kernel 60, stall median(0, 20) = 10; floor 40.
    t = pd.concat([  # d7 first: launches are taken in (rank, dump) order, not in the frame's
        _launch_tiles("d7", 2, 1000.0, 10.0, control_epilogue_ns=0.0, plain_store=False).assign(shape="t", variant=None),
        _launch_tiles("d1", 1, 1000.0, 10.0, control_epilogue_ns=0.0, plain_store=False),
        _launch_tiles("d2", 1, 2000.0, 20.0, control_epilogue_ns=5.0, plain_store=True),
        _launch_tiles("d3", 1, 9e6, 10.0, control_epilogue_ns=0.0, plain_store=False),
        _launch_tiles("d4", 1, 9e6, 10.0, control_epilogue_ns=0.0, plain_store=False),
        _launch_tiles("d5", 1, 9e6, np.nan, control_epilogue_ns=0.0, plain_store=False),
        _launch_tiles("d6", 1, 0.0, 10.0, control_epilogue_ns=0.0, plain_store=False),
        # d8: 1 byte in all (config u): any bytes at all make a launch eligible
        _launch_tiles("d8", 1, 1.0, 10.0, control_epilogue_ns=0.0, plain_store=False).assign(shape="u"),
    ], ignore_index=True)
    dumps = pd.DataFrame({"rank": 0, "dump": [f"d{i}" for i in range(1, 9)] + ["d3"],  # d3 listed twice (two slices)
                          "is_control": [False, False, True, False, False, False, False, False, True],
                          "operands": ["global", "global", "global", "smem", "global", "global", "global", "global", "global"],
                          "slice": [0, 0, 0, 0, 0, 0, 0, 0, 1]})
    w = run_whatifs(t, dumps, LINK)
    assert w.loc[w["shape"] == "u", "alternative"].tolist() == ["as_run", "prefetch", "link_floor"]
    w = w[w["shape"] != "u"].reset_index(drop=True)
    assert list(w.columns) == RUN_COLUMNS
    assert set(w["dest"]) == {"host"} and set(w["schedule"]) == {"wave"}
    assert w[["shape", "variant", "alternative"]].values.tolist() == [
        ["s", "v", "as_run"], ["s", "v", "prefetch"], ["s", "v", "link_floor"],
        ["t", "-", "as_run"], ["t", "-", "sm_count"], ["t", "-", "prefetch"], ["t", "-", "link_floor"]]
    np.testing.assert_array_equal(w["kernel_ns"], [47.5, 47.5, 30.0, 50.0, 60.0, 50.0, 40.0])
    np.testing.assert_array_equal(w["stall_ns"], [20.0, 20.0, np.nan, 0.0, 10.0, 0.0, np.nan])
    np.testing.assert_array_equal(w["parameter"], [1.0, 1.0, np.nan, 2.0, 1.0, 1.0, np.nan])
    np.testing.assert_array_equal(w["gain"], [1.0, 1.0, 1.5625, 1.0, 50.0 / 60.0, 1.0, 1.25])


def test_run_whatifs_without_optional_columns_or_eligible_launches():
    # no epilogue, steps, stages, buffer-wait or plain-store columns: 0 ns, one step, no wait, tensor stores.
    # one launch, 1 CTA, 1000 B, C 10: kernel 30, floor 20 (gain 1.5); dumps table without the launch: not a control.
    t = _launch_tiles("d1", 1, 1000.0, 10.0)
    w = run_whatifs(t, pd.DataFrame({"rank": [1], "dump": ["x"]}), LINK)
    assert w["alternative"].tolist() == ["as_run", "prefetch", "link_floor"]
    assert w["kernel_ns"].tolist() == [30.0, 30.0, 20.0] and w["gain"].tolist() == [1.0, 1.0, 1.5]
    assert w["stall_ns"].iloc[:2].tolist() == [0.0, 0.0]  # tensor stores: a first tile waits for nothing
    # every launch a control → no rows, the table's columns
    none = run_whatifs(t, pd.DataFrame({"rank": [0], "dump": ["d1"], "is_control": [True]}), LINK)
    assert none.empty and list(none.columns) == RUN_COLUMNS
    empty = run_whatifs(t.iloc[:0], pd.DataFrame({"rank": [0], "dump": ["d1"]}), LINK)
    assert empty.empty and list(empty.columns) == RUN_COLUMNS


@pytest.mark.parametrize("steps, stages, cover_tiles", [(4, 1, 1), (3, 2, 0)])  # neither is the one-step default
def test_run_whatifs_passes_each_launchs_epilogue_loads_buffer_wait_and_store_kind(steps, stages, cover_tiles):
    # one launch: its rows are launch_whatifs of its columns (the median of one launch is itself)
    cta, pos = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    nbytes, compute = np.array([1000.0, 800.0, 600.0, 400.0]), np.array([10.0, 20.0, 15.0, 5.0])
    t = pd.DataFrame({"rank": 0, "dump": "d", "cta": cta, "position": pos, "rs_bytes": nbytes, "control_compute_ns": compute,
                      "control_epilogue_ns": 3.0, "load_steps": steps, "load_stages": stages, "cover_tiles": cover_tiles,
                      "plain_store": True, "dest": "host", "shape": "s", "variant": "v", "schedule": "wave"})
    w = run_whatifs(t, pd.DataFrame({"rank": [0], "dump": ["d"]}), LINK).set_index("alternative")
    want = launch_whatifs(cta, pos, nbytes, compute, LINK, epilogue_ns=3.0, steps=steps, stages=stages, cover_tiles=cover_tiles,
                          plain_store=True).set_index("alternative")
    pd.testing.assert_frame_equal(w[["parameter", "kernel_ns", "stall_ns", "gain"]], want, check_names=False)


@pytest.mark.parametrize("k, kept", [(4, 1), (16, 2)])
def test_ties_among_the_default_cta_counts_keep_the_fewest(k, kept):
    # k CTAs, one 1000-byte tile each, no compute: the link is never idle whatever K' (each round's loads wait for
    # that round's stores, the next round is issued the moment they drain): every kernel time is k · 20 ns.
    # Defaults K/2, K/4, K/8 of those in 1 … K−1: k = 4 → {2, 1}, k = 16 → {8, 4, 2}; the tie keeps the fewest.
    t = launch_whatifs(np.arange(k), np.zeros(k, int), 1000.0, 0.0, LINK).set_index("alternative")
    assert t.loc["as_run", "kernel_ns"] == t.loc["sm_count", "kernel_ns"] == 20.0 * k
    assert t.loc["sm_count", "parameter"] == kept


# ---------------------------------------------------------------- with_link_forward: §11 over several batches at once
def _finished(dump: str, dest: str, ctas, positions, rs_bytes) -> pd.DataFrame:
    """Finished tiles of one launch as finish_tiles writes the columns the link prediction reads (compute 5 µs, no
    epilogue, one load step), the recurrence's forward_stall_ns 7 ns and a column the prediction must not touch."""
    n = len(ctas)
    return pd.DataFrame({"rank": 0, "dump": dump, "dest": dest, "cta": ctas, "position": positions, "mainloop_ns": 9999.0,
                         "control_compute_ns": 5000.0, "control_epilogue_ns": 0.0, "rs_bytes": rs_bytes, "load_steps": np.ones(n, np.int32),
                         "load_stages": np.ones(n, np.int32), "cover_tiles": np.zeros(n, np.int32), "plain_store": False,
                         "forward_stall_ns": 7.0, "diagnosis": "none"})


def test_the_link_prediction_of_several_batches_at_once_by_hand():
    """R = 1 B/ns, λ = 100 ns, Q unbounded, C = 5 µs: a CTA's second tile loads at its first store's issue (5 µs)
    and waits for every store issued by then to drain: B / R − λ for one store of B bytes; two CTAs' stores issued at
    the same instant both go first. Other destinations, on-chip operands and empty batches keep the recurrence's."""
    from xstage_trace.analysis.tiles import with_link_forward

    link = LinkModel(rate_gbps=1.0, capacity_bytes=1e12, load_latency_ns=100.0)
    frames = [_finished("a", "host", [0, 0], [0, 1], 1000.0),
              pd.DataFrame(),
              _finished("b", "host", [0, 0, 1], [0, 1, 0], [2000.0, 2000.0, 0.0]),
              _finished("c", "local", [0, 0], [0, 1], 1000.0),
              _finished("d", "host", [0, 0], [0, 1], 1000.0)]
    dumps = pd.DataFrame({"rank": 0, "dump": ["a", "a", "b", "c", "d"], "operands": ["global", "global", "global", "global", "smem"],
                          "is_control": False, "label": ["first", "again", "", "", ""]})  # "a" listed twice: still one launch of two tiles
    out = with_link_forward(frames, dumps, {"host": link})
    assert [len(f) for f in out] == [2, 0, 3, 2, 2]
    np.testing.assert_array_equal(out[0]["forward_stall_ns"], [0.0, 900.0])
    np.testing.assert_array_equal(out[2]["forward_stall_ns"], [0.0, 1900.0, 0.0])
    np.testing.assert_array_equal(out[3]["forward_stall_ns"], [7.0, 7.0])  # no model for local
    np.testing.assert_array_equal(out[4]["forward_stall_ns"], [7.0, 7.0])  # operands in shared memory
    for got, given in zip(out, frames):
        pd.testing.assert_frame_equal(got.drop(columns="forward_stall_ns", errors="ignore"), given.drop(columns="forward_stall_ns", errors="ignore"))
    assert frames[0]["forward_stall_ns"].tolist() == [7.0, 7.0]  # the given frames are not written
    assert with_link_forward(frames, dumps, {}) is frames  # no link model: the frames as given
    assert with_link_forward([pd.DataFrame()], dumps, {"host": link})[0].empty
