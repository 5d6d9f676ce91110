"""Table 3, the kernel trials and the store-path predictions (analysis/stall.py, docs/model.md §4, §5, §10-§12) on
small hand-made inputs whose answers are worked out by hand (or by a few lines of numpy) in the comments
(docs/mutation.md: written against the mutants the other fast tests let through)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.forward import LinkModel, forward_launch
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.stall import (attach_kernel_times, forward_link_kernels, forward_link_launches, forward_link_stall_ns,
                                         forward_stall_ns, kernel_trials, load_steps, round_rate_gbps, stall_summary,
                                         store_stall_predictions, store_wait_summary, store_wait_vs_model, table3_from_parts,
                                         table3_from_tiles, table3_samples)
from xstage_trace.base.schema import TABLE3

NAN = np.nan

# ---------------------------------------------------------------- stall_summary


def test_stall_summary_medians_means_and_counts_per_group_a_missing_key_its_own_group():
    # group h (4 tiles): span 10, NaN, 20, 60 → median 20 (the NaN skipped) but 4 tiles (size, not count);
    # cover 1..4 → 2.5; predicted 0, 30, 90, 30 → median 30, mean 37.5; measured 5, 10, 45, NaN → median 10, mean 20;
    # backpressured T, F, T, T → 3. The tile without a dest is a group of its own (NaN key), after h.
    t = pd.DataFrame({"dest": ["h", "h", "h", "h", None], "rs_span_ns": [10.0, NAN, 20.0, 60.0, 5.0],
                      "cover_ns": [1.0, 2.0, 3.0, 4.0, 7.0], "predicted_stall_ns": [0.0, 30.0, 90.0, 30.0, 8.0],
                      "measured_stall_ns": [5.0, 10.0, 45.0, NAN, 9.0], "backpressured": [True, False, True, True, False]})
    s = stall_summary(t, ["dest"])
    assert list(s.columns) == ["dest", "tiles", "span_med_ns", "cover_med_ns", "predicted_stall_med_ns", "predicted_stall_mean_ns",
                               "measured_stall_med_ns", "measured_stall_mean_ns", "backpressured_tiles"]
    assert s["dest"].iloc[0] == "h" and pd.isna(s["dest"].iloc[1])
    np.testing.assert_array_equal(s.iloc[:, 1:].to_numpy(np.float64),
                                  [[4, 20.0, 2.5, 30.0, 37.5, 10.0, 20.0, 3], [1, 5.0, 7.0, 8.0, 8.0, 9.0, 9.0, 0]])


def test_stall_summary_without_measurement_or_backpressure_columns_has_none_of_theirs():
    t = pd.DataFrame({"dest": ["h", "h"], "rs_span_ns": [10.0, 30.0], "cover_ns": [1.0, 3.0], "predicted_stall_ns": [0.0, 4.0]})
    s = stall_summary(t, ["dest"])
    assert list(s.columns) == ["dest", "tiles", "span_med_ns", "cover_med_ns", "predicted_stall_med_ns", "predicted_stall_mean_ns"]
    assert s.iloc[0, 1:].tolist() == [2, 20.0, 2.0, 2.0, 2.0]


# ---------------------------------------------------------------- Table 3 (§5, §12)

KEYS = dict(dest="host", shape="S1", variant="v", schedule="wave")


def _tile(**kw) -> dict:
    """One tile row; every Table-3 column given (NaN unless set)."""
    row = dict(KEYS, mainloop_ns=NAN, control_mainloop_ns=NAN, noise_ns=200.0, cover_ns=NAN, rs_span_ns=NAN,
               predicted_stall_ns=NAN, measured_stall_ns=NAN, stall_ns=NAN, compute_stall_ns=NAN, control_compute_ns=NAN,
               forward_stall_ns=NAN, backpressured=False)
    row.update(kw)
    return row


# configuration A (host, S1, v, wave), four tiles with a store span:
#   compute (mainloop) 1000, 1300, 1100, 1400 → median 1200
#   control p99 1000, 1000, 1000, NaN → judged 3; noise 200, 200, 300, 300 → median 250
#   inflated: excess 0, 300, 100, NaN vs max(noise, 5 % · 1000 = 50) = 200, 200, 300: only tile 1 (300 > 200) → 1
#   cover 500, 700, 900, 100 → median 600; store span 800, 400, 1000, 600 → median 700
#   slot model from the medians: [700 − 600]₊ = 100; per tile predicted 300, 0, 100, 500 → median 200
#   slot measured 250, 0, NaN, 800 → median 250; |pred − meas| 50, 0, 300 (NaN dropped) → median 50, mean 350 / 3
#   stall 250, 200, NaN, 800 → median 250, measured 3; stalled (stall > noise): 250 > 200, 200 = 200 no, 800 > 300 → 2
#   stall p99: numpy's linear quantile of (200, 250, 800) at 0.99
#   compute part 0, 300, 100, NaN → median 100; control compute 900, 950, 1000, NaN → median 950
#   forward NaN, 10, 20, 30 → median 20; backpressured T, F, F, T → 2
_A = [_tile(mainloop_ns=1000.0, control_mainloop_ns=1000.0, noise_ns=200.0, cover_ns=500.0, rs_span_ns=800.0, predicted_stall_ns=300.0,
            measured_stall_ns=250.0, stall_ns=250.0, compute_stall_ns=0.0, control_compute_ns=900.0, backpressured=True),
      _tile(mainloop_ns=1300.0, control_mainloop_ns=1000.0, noise_ns=200.0, cover_ns=700.0, rs_span_ns=400.0, predicted_stall_ns=0.0,
            measured_stall_ns=0.0, stall_ns=200.0, compute_stall_ns=300.0, control_compute_ns=950.0, forward_stall_ns=10.0),
      _tile(mainloop_ns=1100.0, control_mainloop_ns=1000.0, noise_ns=300.0, cover_ns=900.0, rs_span_ns=1000.0, predicted_stall_ns=100.0,
            compute_stall_ns=100.0, control_compute_ns=1000.0, forward_stall_ns=20.0),
      _tile(mainloop_ns=1400.0, noise_ns=300.0, cover_ns=100.0, rs_span_ns=600.0, predicted_stall_ns=500.0, measured_stall_ns=800.0,
            stall_ns=800.0, forward_stall_ns=30.0, backpressured=True)]
# A's tile without a store span (the other compute: 3000); everything else about it must not count
_A_OTHER = _tile(mainloop_ns=3000.0, control_mainloop_ns=1.0, cover_ns=9e9, predicted_stall_ns=9e9, measured_stall_ns=9e9,
                 stall_ns=9e9, compute_stall_ns=9e9, control_compute_ns=9e9, forward_stall_ns=9e9, backpressured=True, noise_ns=9e9)
# configuration B: shape, variant and schedule missing, and a shape named "-": one key (host, -, -, -), two tiles
_B = [_tile(shape=None, variant=None, schedule=None, mainloop_ns=10.0, cover_ns=40.0, rs_span_ns=30.0, predicted_stall_ns=0.0),
      _tile(shape="-", variant=None, schedule=None, mainloop_ns=20.0, cover_ns=60.0, rs_span_ns=50.0, predicted_stall_ns=0.0)]
# configuration D: a destination named "-": one store tile (compute 7). Tiles without a destination share its key
# codes ("-") but are left out, with or without a store span.
_D = [_tile(dest="-", mainloop_ns=7.0, rs_span_ns=5.0, cover_ns=1.0),
      _tile(dest=None, mainloop_ns=9e9, rs_span_ns=5.0, cover_ns=1.0, stall_ns=9e9, backpressured=True),
      _tile(dest=None, mainloop_ns=8e9)]


def _table3_tiles() -> pd.DataFrame:
    rows = [_D[1], _A[2], _B[0], _A_OTHER, _A[0], _D[0], _A[3], _B[1], _D[2], _A[1]]  # any order
    return pd.DataFrame(rows)


def test_table3_rows_by_hand():
    t3 = table3_from_tiles(_table3_tiles())
    assert [tuple(k) for k in t3[["dest", "shape", "variant", "schedule"]].values] == [  # in key order
        ("-", "S1", "v", "wave"), ("host", "-", "-", "-"), ("host", "S1", "v", "wave")]
    a = t3.iloc[2]
    want = dict(tiles=4, measured_tiles=3, stalled_tiles=2, backpressured_tiles=2, inflated_tiles=1, inflation_judged_tiles=3,
                compute_ns=1200.0, other_compute_ns=3000.0, control_compute_ns=950.0, cover_ns=600.0, store_span_ns=700.0,
                slot_pred_medians_ns=100.0, slot_pred_ns=200.0, slot_meas_ns=250.0, slot_err_median_ns=50.0,
                slot_err_mean_ns=350.0 / 3, stall_ns=250.0, stall_p99_ns=float(np.quantile([200.0, 250.0, 800.0], 0.99)),
                compute_stall_ns=100.0, forward_stall_ns=20.0, noise_ns=250.0)
    assert {k: a[k] for k in want} == want
    for c in ("tiles", "measured_tiles", "stalled_tiles", "backpressured_tiles", "inflated_tiles", "inflation_judged_tiles"):
        assert isinstance(a[c], (int, np.integer)), c


def test_table3_missing_keys_are_one_key_and_a_destination_named_dash_is_not_a_missing_one():
    t3 = table3_from_tiles(_table3_tiles())
    b, d = t3.iloc[1], t3.iloc[0]
    # B: compute 10, 20 → 15; cover 40, 60 → 50; span 30, 50 → 40: from the medians [40 − 50]₊ = 0; nothing measured
    assert b["tiles"] == 2 and b["compute_ns"] == 15.0 and b["cover_ns"] == 50.0 and b["store_span_ns"] == 40.0
    assert b["slot_pred_medians_ns"] == 0.0 and b["measured_tiles"] == 0 and b["stalled_tiles"] == 0
    assert np.isnan(b["stall_ns"]) and np.isnan(b["stall_p99_ns"]) and np.isnan(b["slot_err_mean_ns"])
    assert np.isnan(b["other_compute_ns"])  # no tile without a store span
    # D: only the "-" tile; the tiles without a destination (9e9 and 8e9) count nowhere
    assert d["tiles"] == 1 and d["compute_ns"] == 7.0 and np.isnan(d["other_compute_ns"])
    assert d["backpressured_tiles"] == 0 and d["stalled_tiles"] == 0 and d["inflation_judged_tiles"] == 0


def test_table3_has_the_schema_columns_less_the_kernel_times():
    t3 = table3_from_tiles(_table3_tiles())
    names = [f.name for f in TABLE3]
    assert list(t3.columns) == [c for c in names if c not in ("kernel_ns", "trials", "ranks")]
    assert len(t3.columns) == len(names) - 3


def test_table3_of_no_tiles_is_empty_with_its_columns():
    t3 = table3_from_tiles(pd.DataFrame([_A[0]]).iloc[:0])
    assert t3.empty and "slot_pred_medians_ns" in t3.columns
    assert table3_samples(pd.DataFrame([_A[0]]).iloc[:0]) == ({}, {})


def test_table3_from_parts_past_the_cap_equals_the_table_of_all_tiles():
    # the tiles in three parts (A's err samples 50 | 0 | 300 land in different parts): past the cap the order
    # statistics come from passes over the parts and the err mean from the parts' sums, 350 / 3 again
    t = _table3_tiles()
    parts = [t.iloc[:4], t.iloc[4:7], t.iloc[7:]]
    calls = []

    def gen():
        calls.append(1)
        return iter(parts)

    got = table3_from_parts(gen, 2)
    pd.testing.assert_frame_equal(got, table3_from_tiles(t))
    assert got.loc[2, "slot_err_mean_ns"] == 350.0 / 3 and got.loc[2, "tiles"] == 4 and got.loc[2, "measured_tiles"] == 3
    assert len(calls) > 1  # the cap forced passes


def test_table3_samples_of_disjoint_tiles_add_up():
    t = _table3_tiles()
    s1, c1 = table3_samples(t.iloc[:5])
    s2, c2 = table3_samples(t.iloc[5:])
    s, c = table3_samples(t)
    a = ("host", "S1", "v", "wave")
    assert c[a, "tiles"] == c1.get((a, "tiles"), 0) + c2.get((a, "tiles"), 0) == 4
    assert sorted(s[a, "err"].tolist()) == [0.0, 50.0, 300.0]
    assert sorted(np.r_[s1.get((a, "err"), []), s2.get((a, "err"), [])].tolist()) == [0.0, 50.0, 300.0]
    assert sorted(s[a, "noise"].tolist()) == [200.0, 200.0, 300.0, 300.0]
    assert s[a, "other_compute"].tolist() == [3000.0]


# ---------------------------------------------------------------- kernel trials and times (§10)

L1, L2, L3 = "dest=host shape=S1 schedule=wave", "dest=host shape=S2 schedule=wave trial=5", "dest=host shape=S3 schedule=wave trial=-1"


def _kernels(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["rank", "name", "short_name", "start_ns", "duration_ns", "nvtx_range"])


def _dumps() -> pd.DataFrame:
    return pd.DataFrame([  # L1 of rank 0 twice (two slices of one dump)
        {"rank": 0, "label": L1, "dest": "host", "shape": "S1", "variant": None, "schedule": "wave", "slice": 0},
        {"rank": 0, "label": L1, "dest": "host", "shape": "S1", "variant": None, "schedule": "wave", "slice": 1},
        {"rank": 0, "label": L2, "dest": "host", "shape": "S2", "variant": "x", "schedule": "wave"},
        {"rank": 0, "label": L3, "dest": "host", "shape": "S3", "variant": "x", "schedule": "wave"},
        {"rank": 1, "label": L1, "dest": "host", "shape": "S1", "variant": None, "schedule": "wave"}])


def test_kernel_trials_count_launches_in_time_order_per_rank_and_take_a_labelled_trial_as_is():
    # rank 0, L1: launches at 100, 200, 300 (given out of order): 1 warm-up → trials −1 (dropped), 0, 1;
    # L2 carries trial=5: both its launches are trial 5 (no warm-up subtracted); L3's trial=−1 is a warm-up: dropped;
    # a kernel outside any range, or under a range no dump names, is no launch. rank 1, L1: at 50, 60 → trials −1, 0.
    # the launch at 300 has no short name: its full name. Variant None → "-". ms = ns / 1e6.
    k = _kernels([(0, "k(a)", "k", 300, 3e6, L1), (0, "k(a)", "k", 100, 1e6, L1), (0, "k(a)", "k", 200, 2e6, L1),
                  (0, "g(b)", "g", 250, 6e6, L2), (0, "g(b)", "g", 150, 5e6, L2), (0, "h", "h", 10, 7e6, L3),
                  (0, "z", "z", 5, 8e6, None), (0, "y", "y", 6, 9e6, "dest=elsewhere"),
                  (1, "k(a)", "k", 60, 4e6, L1), (1, "k(a)", "k", 50, 1e6, L1)])
    k.loc[0, "short_name"] = None
    got = kernel_trials(k, _dumps(), warmup_launches=1)
    assert list(got.columns) == ["rank", "dest", "shape", "variant", "schedule", "kernel", "trial", "kernel_ms"]
    assert got.index.tolist() == [0, 1, 2, 3, 4]
    assert got[["rank", "shape", "variant", "kernel", "trial"]].values.tolist() == [
        [0, "S2", "x", "g", 5], [0, "S1", "-", "k", 0], [0, "S2", "x", "g", 5], [0, "S1", "-", "k(a)", 1], [1, "S1", "-", "k", 0]]
    assert got["kernel_ms"].tolist() == [5.0, 2.0, 6.0, 3.0, 4.0] and got["trial"].dtype.kind == "i"
    assert (got["dest"] == "host").all() and (got["schedule"] == "wave").all()


def test_kernel_trials_without_warmups_or_short_names():
    # no warm-up: rank 0's L1 launches are trials 0, 1; no short_name column: the kernel is the full name
    k = _kernels([(0, "k(a)", None, 200, 2e6, L1), (0, "k(a)", None, 100, 1e6, L1)]).drop(columns="short_name")
    got = kernel_trials(k, _dumps())
    assert got["trial"].tolist() == [0, 1] and got["kernel"].tolist() == ["k(a)", "k(a)"] and got["kernel_ms"].tolist() == [1.0, 2.0]


def test_kernel_trials_of_no_kernels_or_no_dumps_are_empty_with_the_columns():
    cols = ["rank", "dest", "shape", "variant", "schedule", "kernel", "trial", "kernel_ms"]
    k = _kernels([(0, "k", "k", 100, 1e6, L1)])
    for got in (kernel_trials(k.iloc[:0], _dumps()), kernel_trials(k, _dumps().iloc[:0]), kernel_trials(k, pd.DataFrame()),
                kernel_trials(pd.DataFrame(), _dumps())):
        assert got.empty and list(got.columns) == cols


def _t3_keys(rows) -> pd.DataFrame:
    return pd.DataFrame([dict(zip(["dest", "shape", "variant", "schedule"], r), tiles=1) for r in rows])


def test_kernel_times_are_the_median_over_trials_of_the_slowest_rank():
    # (host, S1, -, wave): trial 0 ranks 1, 2 ms → 2; trial 1 ranks 4, 3 → 4: median 3 ms = 3e6 ns, 2 trials, 2 ranks.
    # (host, S2, -, schedule missing → "-"): one trial, one rank, 5 ms. (host, S9): no trials → NaN.
    trials = pd.DataFrame([(0, "S1", "wave", 0, 1.0), (1, "S1", "wave", 0, 2.0), (0, "S1", "wave", 1, 4.0), (1, "S1", "wave", 1, 3.0),
                           (0, "S2", None, 0, 5.0)], columns=["rank", "shape", "schedule", "trial", "kernel_ms"]).assign(dest="host", variant="-")
    t3 = _t3_keys([("host", "S9", "-", "wave"), ("host", "S1", "-", "wave"), ("host", "S2", "-", "-")])
    out = attach_kernel_times(t3, trials)
    np.testing.assert_array_equal(out["kernel_ns"], [NAN, 3e6, 5e6])
    np.testing.assert_array_equal(out["trials"], [NAN, 2.0, 1.0])
    np.testing.assert_array_equal(out["ranks"], [NAN, 2.0, 1.0])
    assert "kernel_ns" not in t3.columns  # a copy
    assert list(out.columns) == ["dest", "shape", "variant", "schedule", "tiles", "kernel_ns", "trials", "ranks"]


def test_kernel_times_without_trials_or_rows_are_nan():
    t3 = _t3_keys([("host", "S1", "-", "wave")])
    out = attach_kernel_times(t3, pd.DataFrame(columns=["rank", "dest", "shape", "variant", "schedule", "trial", "kernel_ms"]))
    assert np.isnan(out[["kernel_ns", "trials", "ranks"]].to_numpy(np.float64)).all() and len(out) == 1
    trials = pd.DataFrame([(0, "host", "S1", "-", "wave", 0, 1.0)], columns=["rank", "dest", "shape", "variant", "schedule", "trial", "kernel_ms"])
    assert np.isnan(attach_kernel_times(t3, pd.DataFrame())["kernel_ns"]).all()  # no nsys report: no trials table at all
    empty = attach_kernel_times(t3.iloc[:0], trials)
    assert empty.empty and list(empty.columns) == ["dest", "shape", "variant", "schedule", "tiles", "kernel_ns", "trials", "ranks"]


# ---------------------------------------------------------------- store-path predictions (§2, §4)

# floor T_iss^0 = B / 10 ns at every K (one B point each: linear in B through 0), R = 10 B/ns
FLOOR = {(1, 100): 10.0, (2, 100): 10.0, (3, 100): 10.0}


def test_store_stall_without_a_capacity_is_eq1_per_burst_and_the_last_gap_unbounded():
    # K 2, 2, 2; V 1000, 600, 2000 → B 500, 300, 1000 → T0 50, 30, 100; V/R 100, 60, 200.
    # gaps 40, 20, (5 → ∞): [V/R − G − T0]₊ = [100 − 40 − 50, 60 − 20 − 30, 200 − ∞ − 100]₊ = 10, 10, 0
    model = PlatformModel(rate_gbps=10.0, issue_floor_ns=FLOOR)
    bursts = pd.DataFrame({"producers": [2, 2, 2], "volume_bytes": [1000, 600, 2000]})
    gaps = np.array([40.0, 20.0, 5.0])
    stall, rate = store_stall_predictions(bursts, gaps, model)
    assert stall.tolist() == [10.0, 10.0, 0.0] and rate == 10.0
    assert gaps.tolist() == [40.0, 20.0, 5.0]  # the caller's gaps untouched
    # one gap (an integer) for every burst: [100 − 40 − 50, 60 − 40 − 30, …]₊ = 10, 0, 0
    assert store_stall_predictions(bursts, 40, model)[0].tolist() == [10.0, 0.0, 0.0]
    # one producer: B = V = 1000 → T0 100 = V/R: [100 − 20 − 100]₊ = 0
    one = pd.DataFrame({"producers": [2, 1, 2], "volume_bytes": [1000, 1000, 2000]})
    assert store_stall_predictions(one, gaps, model)[0].tolist() == [10.0, 0.0, 0.0]


def test_store_stall_reads_the_floor_at_each_bursts_producers():
    # T0 = 40·B/100 at K = 2, 10·B/100 at K = 1; K 2, V 3000 → B 1500 → T0 600 > V/R 300: no overhead
    model = PlatformModel(rate_gbps=10.0, issue_floor_ns={(1, 100): 10.0, (2, 100): 40.0})
    bursts = pd.DataFrame({"producers": [2, 1], "volume_bytes": [3000, 100]})
    assert store_stall_predictions(bursts, 0.0, model)[0].tolist() == [0.0, 0.0]


def test_store_stall_rate_is_the_calibrated_r_of_the_full_rounds_k_and_b():
    # the full round (K 3, B 3000 / 3 = 1000): R(3, B) log-linear between B 100 (20) and 1000 (40) → 40, not R(3) = 10
    # nor anything of K = 1 (R(1) 5, R(1, 100) 1); as the second round or as the first
    from xstage_trace.analysis.calibration_fit import CalibratedPlatform

    model = CalibratedPlatform(rate_gbps=7.0, issue_floor_ns=FLOOR, rate_by_producers_gbps={1: 5.0, 3: 10.0},
                               rate_by_configuration_gbps={(3, 100): 20.0, (3, 1000): 40.0, (1, 100): 1.0})
    bursts = pd.DataFrame({"producers": [1, 3], "volume_bytes": [100, 3000]})
    assert store_stall_predictions(bursts, 0.0, model)[1] == 40.0
    assert store_stall_predictions(bursts.iloc[::-1], 0.0, model)[1] == 40.0


def test_store_stall_with_a_capacity_is_the_stalled_trajectory_at_the_full_rounds_q():
    # K 1, 3, 2 (the full round is the second: Q(3) = 500, not Q(1) = 100); V 200, 1500, 600 → B 200, 500, 300
    # → T0 20, 50, 30; R 10, G 10 (last ∞), o 5. Eq. 15/16 by hand, q_0 = 0:
    #   n0: T = max(20, (0 + 200 − 500)/10) = 20; q1 = [0 + 200 − 10·(20 + 10 + 5)]₊ = 0
    #   n1: T = max(50, (0 + 1500 − 500)/10 = 100) = 100 → +50; q2 = [1500 − 10·(100 + 10 + 5)]₊ = 350
    #   n2: T = max(30, (350 + 600 − 500)/10 = 45) = 45 → +15
    model = PlatformModel(rate_gbps=10.0, issue_floor_ns=FLOOR, capacity_by_producers={1: 100.0, 3: 500.0}, loop_overhead_ns=5.0)
    bursts = pd.DataFrame({"producers": [1, 3, 2], "volume_bytes": [200, 1500, 600]})
    stall, rate = store_stall_predictions(bursts, 10.0, model)
    np.testing.assert_allclose(stall, [0.0, 50.0, 15.0], rtol=0, atol=1e-9)
    assert rate == 10.0


# ---------------------------------------------------------------- operand-load steps (§11)


def test_k_blocks_are_k_over_128_of_the_shapes_last_k():
    tile = np.arange(3)
    got = load_steps("k_blocks", tile, "m64n32k512", None)
    assert got.tolist() == [4, 4, 4] and got.dtype.kind == "i"  # counts of steps
    assert load_steps("k_blocks", tile, "m64n32k200", None).tolist() == [1, 1, 1]  # 200 // 128 = 1, not 1.5625
    assert load_steps("k_blocks", tile, "m1k2k256", None).tolist() == [2, 2, 2]  # the last k: 256 / 128
    assert load_steps("k_blocks", tile, "m64n32k100", None).tolist() == [1, 1, 1]  # 100 // 128 = 0 → at least 1
    for shape in ("m64n32kx", None, "m64n32", ""):
        got = load_steps("k_blocks", tile, shape, None)
        assert got.tolist() == [1, 1, 1] and got.dtype == np.int64, shape


def test_kv_blocks_follow_the_causal_mask_of_the_tiles_m_block():
    # m block in the low 12 bits (a head in the next ones): m = 0..3, seqlen 512, b_m = b_n = 128:
    # causal ⌈min(512, (m + 1)·128) / 128⌉ = 1, 2, 3, 4; not causal ⌈512 / 128⌉ = 4 each
    tile = np.array([0, 1 | (5 << 12), 2, 3])
    words = "seqlen=512 block_m=128 block_n=128 causal=1 note"
    assert load_steps("kv_blocks", tile, "s", words).tolist() == [1, 2, 3, 4]
    assert load_steps("kv_blocks", tile, "s", words.replace("causal=1", "causal=0")).tolist() == [4, 4, 4, 4]
    # block_n 256: causal ⌈128/256⌉ … = 1, 1, 2, 2
    assert load_steps("kv_blocks", tile, None, words.replace("block_n=128", "block_n=256")).tolist() == [1, 1, 2, 2]
    # a word with two "=" is its key's value as a whole ("5=12": not a number), and a key given twice is its last value
    assert load_steps("kv_blocks", tile, None, words + " seqlen=5=12").tolist() == [1, 1, 1, 1]
    assert load_steps("kv_blocks", tile, None, "seqlen=5=12 " + words).tolist() == [1, 2, 3, 4]
    # seqlen 0 gives no block: at least one step
    assert load_steps("kv_blocks", tile, None, words.replace("seqlen=512", "seqlen=0")).tolist() == [1, 1, 1, 1]


def test_kv_blocks_without_the_geometry_and_other_rules_are_one_step():
    tile = np.arange(2)
    for extra in (None, "seqlen=512 block_m=128 block_n=128", "seqlen=512 block_m=x block_n=128 causal=1"):
        got = load_steps("kv_blocks", tile, "s", extra)
        assert got.tolist() == [1, 1] and got.dtype == np.int64, extra
    for rule in (None, "other"):
        got = load_steps(rule, tile, "m64n32k512", "seqlen=512 block_m=128 block_n=128 causal=1")
        assert got.tolist() == [1, 1] and got.dtype == np.int64


# ---------------------------------------------------------------- §4/§12 forward prediction from the burst sequence

FWD_MODEL = PlatformModel(rate_gbps=10.0, issue_floor_ns=FLOOR)  # no capacity: Eq. 1 per round


def _fwd_tiles() -> pd.DataFrame:
    """Launch (rank 0, dump d, host): CTA 0 and CTA 1 each store at positions 0 and 1, then compute one tile that stores
    nothing; CTA 1's second tile has no control: its own compute span (20) stands in. Launch (rank 1, dump d): a
    dump of the same name on another rank is another launch. Launch (2, p): a tile between two stores, and CTAs of
    different store counts. Launches (3, q) and (3, s): one CTA storing twice, and a single tile. Launch (4, u): a CTA
storing once with no tile after it before a CTA storing twice. Skipped: (0, k)
    stores nothing, (0, e) stores to an uncalibrated destination, (0, h) has no offered compute at all (first in
    the frame, so that a launch skipped does not end the loop)."""
    rows = [  # rank, dump, dest, cta, position, control compute, mainloop, store span, bytes
        (0, "k", "host", 0, 0, 5.0, 999.0, NAN, 0.0), (0, "k", "host", 0, 1, 5.0, 999.0, NAN, 0.0),
        (0, "e", "local", 0, 0, 5.0, 999.0, 1.0, 9e9), (0, "e", "local", 0, 1, 5.0, 999.0, NAN, 0.0),
        (0, "h", "host", 0, 0, NAN, NAN, 1.0, 100.0), (0, "h", "host", 0, 1, NAN, NAN, NAN, 0.0),
        (0, "d", "host", 0, 0, 30.0, 999.0, 1.0, 1000.0), (0, "d", "host", 0, 1, 40.0, 999.0, 1.0, 400.0),
        (0, "d", "host", 0, 2, 10.0, 999.0, NAN, 9e9),
        (0, "d", "host", 1, 0, 50.0, 999.0, 1.0, 600.0), (0, "d", "host", 1, 1, NAN, 20.0, 1.0, 200.0),
        (0, "d", "host", 1, 2, 60.0, 999.0, NAN, 9e9),
        (1, "d", "host", 0, 0, 5.0, 999.0, 1.0, 500.0), (1, "d", "host", 0, 1, 30.0, 999.0, NAN, 9e9),
        (2, "p", "host", 0, 0, 30.0, 999.0, 1.0, 1000.0), (2, "p", "host", 0, 1, 15.0, 999.0, NAN, 9e9),
        (2, "p", "host", 0, 2, 25.0, 999.0, 1.0, 400.0), (2, "p", "host", 0, 3, 5.0, 999.0, NAN, 9e9),
        (2, "p", "host", 1, 0, 20.0, 999.0, 1.0, 600.0), (2, "p", "host", 1, 1, 5.0, 999.0, NAN, 9e9),
        (3, "q", "host", 0, 0, 10.0, 999.0, 1.0, 500.0), (3, "q", "host", 0, 1, 10.0, 999.0, 1.0, 500.0),
        (3, "s", "host", 0, 0, 10.0, 999.0, 1.0, 500.0),
        (4, "u", "host", 0, 0, 10.0, 999.0, 1.0, 1000.0),
        (4, "u", "host", 1, 0, 10.0, 999.0, 1.0, 600.0), (4, "u", "host", 1, 1, 30.0, 999.0, NAN, 9e9),
        (4, "u", "host", 1, 2, 10.0, 999.0, 1.0, 200.0), (4, "u", "host", 1, 3, 40.0, 999.0, NAN, 9e9),
    ]
    t = pd.DataFrame(rows, columns=["rank", "dump", "dest", "cta", "position", "control_compute_ns", "mainloop_ns", "rs_span_ns", "rs_bytes"])
    rest = np.random.default_rng(3).permutation(np.arange(6, len(t)))
    return t.iloc[np.r_[0, 2, 4, rest, 1, 3, 5]].reset_index(drop=True)  # the skipped launches first, rows in any order


def _by_key(t: pd.DataFrame, values: np.ndarray) -> dict:
    return {(r, d, c, p): v for r, d, c, p, v in zip(t["rank"], t["dump"], t["cta"], t["position"], values)}


def _known(t: pd.DataFrame, values: np.ndarray) -> dict:
    return {k: v for k, v in _by_key(t, values).items() if not np.isnan(v)}


# launch (0, d): round 0 = position 0 of both CTAs: V 1600, K 2, B 800 → T0 80; round 1: V 600, B 300 → T0 30.
# offered gap after a store tile: the compute through the CTA's next store tile: round 0 CTA 0 40, CTA 1 20
# → median G_0 = 30; the last round's is unbounded. Eq. 1: ΔT_0 = [1600/10 − 30 − 80]₊ = 50, ΔT_1 = 0
# → T_iss = 130, 30. Cover (one tile): the CTA's next tile's offered compute: CTA 0 40, 10; CTA 1 20, 60
# → stall [130 − 40, 30 − 10] = 90, 20; [130 − 20, 30 − 60]₊ = 110, 0; tiles without a store span NaN.
# launch (1, d): one round, V 500, K 1 → T0 50, no gap after it: T_iss 50; cover 30 → 20.
# launch (2, p): round 0 = CTA 0's and CTA 1's first stores: V 1600, K 2 → T0 80; gaps CTA 0 15 + 25 = 40 (the
# tile between and the next store tile), CTA 1 5 → G_0 22.5: ΔT_0 = [160 − 22.5 − 80]₊ = 57.5 → 137.5; round 1 is
# CTA 0's second store alone: V 400, K 1 → 40. Cover: 15, 5; 5 → 122.5, 35; 132.5.
# launch (3, q): round 0 V 500, K 1 → T0 50, G 10: [50 − 10 − 50]₊ = 0 → 50, cover 10 → 40; round 1: 50, no tile after.
# launch (3, s): one tile, no tile after it: unknown.
# launch (4, u): round 0 V 1600, K 2 → T0 80; CTA 0 offers nothing after its store (not CTA 1's compute), CTA 1 30 + 10
# → G_0 40: ΔT_0 = [160 − 40 − 80]₊ = 40 → 120; round 1 V 200, K 1 → 20. Cover: CTA 1 30, 40 → 90, [20 − 40]₊ = 0.
FWD_WANT = {(4, "u", 1, 0): 90.0, (4, "u", 1, 2): 0.0, (0, "d", 0, 0): 90.0, (0, "d", 0, 1): 20.0, (0, "d", 1, 0): 110.0, (0, "d", 1, 1): 0.0, (1, "d", 0, 0): 20.0,
            (2, "p", 0, 0): 122.5, (2, "p", 0, 2): 35.0, (2, "p", 1, 0): 132.5, (3, "q", 0, 0): 40.0}


def test_forward_stall_is_the_rounds_issue_time_beyond_the_next_tiles_offered_compute():
    t = _fwd_tiles()
    assert _known(t, forward_stall_ns(t, {"host": FWD_MODEL})) == FWD_WANT


def test_forward_stall_covered_by_two_tiles_or_by_its_own_count_or_none():
    # cover_tiles 2 (rank 1's tiles 1): (0, d) CTA 0 position 0: 40 + 10 → 130 − 50 = 80; CTA 1 position 0: 20 + 60
    # → 50; (2, p) CTA 0 position 0: 15 + 25 → 137.5 − 40 = 97.5; (1, d) covered by one tile: 20 as before;
    # every other store tile has fewer than 2 tiles after it: unknown.
    t = _fwd_tiles()
    got = forward_stall_ns(t.assign(cover_tiles=np.where(t["rank"] == 1, 1, 2)), {"host": FWD_MODEL})
    assert _known(t, got) == {(0, "d", 0, 0): 80.0, (0, "d", 1, 0): 50.0, (2, "p", 0, 0): 97.5, (1, "d", 0, 0): 20.0,
                              (4, "u", 1, 0): 120.0 - 40.0}
    # cover_tiles 0: the stall is the issue time itself, wherever the round's issue is known
    got = forward_stall_ns(t.assign(cover_tiles=0), {"host": FWD_MODEL})
    assert _known(t, got) == {
        (0, "d", 0, 0): 130.0, (0, "d", 0, 1): 30.0, (0, "d", 1, 0): 130.0, (0, "d", 1, 1): 30.0, (1, "d", 0, 0): 50.0,
        (2, "p", 0, 0): 137.5, (2, "p", 0, 2): 40.0, (2, "p", 1, 0): 137.5, (3, "q", 0, 0): 50.0, (3, "q", 0, 1): 50.0,
        (3, "s", 0, 0): 50.0, (4, "u", 0, 0): 120.0, (4, "u", 1, 0): 120.0, (4, "u", 1, 2): 20.0}


def test_forward_stall_reads_the_floor_at_the_rounds_producers():
    # T0 = 40·B/100 at K = 2 (10·B/100 at K = 1): two CTAs storing 500 B once → K 2, B 500 → 200 ns, not 50;
    # one round (no gap after it): no overhead; no cover tile: the stall is the issue time
    model = PlatformModel(rate_gbps=10.0, issue_floor_ns={(1, 100): 10.0, (2, 100): 40.0})
    t = pd.DataFrame({"rank": 0, "dump": "d", "dest": "host", "cta": [0, 1], "position": 0, "control_compute_ns": 5.0,
                      "mainloop_ns": 5.0, "rs_span_ns": 1.0, "rs_bytes": 500.0, "cover_tiles": 0})
    assert forward_stall_ns(t, {"host": model}).tolist() == [200.0, 200.0]


def test_forward_stall_without_a_model_or_tiles_is_nan():
    t = _fwd_tiles()
    assert np.isnan(forward_stall_ns(t, {})).all() and len(forward_stall_ns(t, {})) == len(t)
    assert np.isnan(forward_stall_ns(t, {"elsewhere": FWD_MODEL})).all()
    assert forward_stall_ns(t.iloc[:0], {"host": FWD_MODEL}).shape == (0,)


def test_forward_stall_of_tiles_without_a_destination_is_nan():
    # a launch without a destination has no model, whatever the destinations of the others
    t = _fwd_tiles()
    t = t[t["dump"] == "d"].assign(dest=lambda f: np.where(f["rank"] == 1, None, f["dest"]))
    got = _known(t, forward_stall_ns(t, {"host": FWD_MODEL}))
    assert got == {k: v for k, v in FWD_WANT.items() if k[:2] == (0, "d")}


def test_forward_stall_without_a_bytes_column_stores_nothing():
    # no rs_bytes: V = 0 in every round → T0 0 and no overhead: stall [0 − cover]₊ = 0 wherever the cover is known
    t = _fwd_tiles().drop(columns="rs_bytes")
    assert _known(t, forward_stall_ns(t, {"host": FWD_MODEL})) == {k: 0.0 for k in FWD_WANT}


def test_forward_stall_reads_object_columns_with_none_as_numbers():
    t = _fwd_tiles()
    obj = t.copy()
    obj["control_compute_ns"] = pd.Series([None if pd.isna(v) else v for v in t["control_compute_ns"]], dtype=object)
    assert _known(obj, forward_stall_ns(obj, {"host": FWD_MODEL})) == FWD_WANT


def test_forward_stall_of_a_dump_name_on_two_ranks_is_each_ranks_own():
    # found by mutation testing: the rounds were formed per dump name, so rank 1's store joined rank 0's round 0
    # (K 3, V 2100: rank 1's tile was predicted 150 ns instead of its own round's 20 ns)
    t = _fwd_tiles()
    whole = forward_stall_ns(t, {"host": FWD_MODEL})
    for rank in (0, 1, 2, 3, 4):
        mine = (t["rank"] == rank).to_numpy()
        np.testing.assert_array_equal(whole[mine], forward_stall_ns(t[mine], {"host": FWD_MODEL}))


# ---------------------------------------------------------------- §11 path-drain forward prediction (wiring)

# Q = 0: a store is accepted only as it drains, so the buffer wait (cover tiles), the load steps and stages all change
# the prediction of launch (0, d) below (checked by forward_launch: cover 1 differs from 0 and 2, stages 1 from 2)
LINK = LinkModel(rate_gbps=50.0, capacity_bytes=0.0, load_latency_ns=4.0, issue_floor_ns=2.0)
_D0 = dict(cta=[0, 0, 0, 1, 1, 1], position=[0, 1, 2, 0, 1, 2], bytes=[500.0, 500.0, 0.0, 1000.0, 1000.0, 200.0],
           compute=[20.0, 10.0, 1.0, 5.0, 5.0, 1.0], epilogue=[3.0, 0.0, 3.0, 3.0, 3.0, 0.0])


def _link_tiles() -> pd.DataFrame:
    """Launch (0, d): 2 CTAs × 3 tiles, 2 load steps in 2 stages, buffer covered by 2 tiles (the largest of the
    column), tensor stores; a missing control compute falls back to the tile's own, a missing epilogue or byte count
    is 0. Launch (1, d): the same dump name on rank 1, plain stores. (0, e): an uncalibrated destination; (0, f):
    operands in shared memory; (0, g): a tile without any offered compute."""
    d0 = [(0, "d", "host", c, p, x, 99.0, e, nb, 2, 2, k, "global", False)
          for c, p, x, e, nb, k in zip(_D0["cta"], _D0["position"], _D0["compute"], _D0["epilogue"], _D0["bytes"], [2, 0, 2, 2, 2, 2])]
    d0[1] = d0[1][:5] + (NAN, 10.0, NAN) + d0[1][8:]      # no control: its own compute span 10; no epilogue: 0
    d0[2] = d0[2][:8] + (NAN,) + d0[2][9:]                # no byte count: 0
    rows = d0 + [  # rank, dump, dest, cta, position, control compute, mainloop, epilogue, bytes, steps, stages, cover, operands, plain
        (1, "d", "host", 0, 0, 12.0, 99.0, 1.0, 600.0, 3, 1, 0, "global", True),
        (1, "d", "host", 0, 1, 8.0, 99.0, 1.0, 400.0, 3, 1, 0, "global", True),
        (0, "e", "local", 0, 0, 10.0, 99.0, 0.0, 100.0, 1, 1, 1, "global", False),
        (0, "f", "host", 0, 0, 10.0, 99.0, 0.0, 100.0, 1, 1, 1, "smem", False),
        (0, "g", "host", 0, 0, 10.0, 99.0, 0.0, 100.0, 1, 1, 1, "global", False),
        (0, "g", "host", 0, 1, NAN, NAN, 0.0, 100.0, 1, 1, 1, "global", False),
    ]
    t = pd.DataFrame(rows, columns=["rank", "dump", "dest", "cta", "position", "control_compute_ns", "mainloop_ns", "control_epilogue_ns",
                                    "rs_bytes", "load_steps", "load_stages", "cover_tiles", "operands", "plain_store"])
    return t.iloc[[8, 9, 10, 0, 7, 3, 11, 1, 6, 4, 2, 5]].reset_index(drop=True)  # skipped launches first, rows in any order


def _rows(t: pd.DataFrame, rank: int) -> np.ndarray:
    """Launch (rank, d)'s rows in (cta, position) order."""
    r = np.flatnonzero((t["rank"] == rank) & (t["dump"] == "d"))
    return r[np.lexsort((t["position"].to_numpy()[r], t["cta"].to_numpy()[r]))]


def _launch0(**kw):
    """forward_launch of launch (0, d)'s inputs, written out (``kw`` overrides)."""
    args = dict(epilogue_ns=np.array(_D0["epilogue"]), steps=2, stages=2, cover_tiles=2, plain_store=False)
    args.update(kw)
    return forward_launch(_D0["cta"], _D0["position"], _D0["bytes"], _D0["compute"], LINK, **args)


def _want_link(t: pd.DataFrame, cover_tiles: int = 2):
    """{rank: (launch (rank, d)'s rows, forward_launch of its inputs)}."""
    f1 = forward_launch([0, 0], [0, 1], [600.0, 400.0], [12.0, 8.0], LINK, epilogue_ns=np.array([1.0, 1.0]), steps=3, stages=1,
                        cover_tiles=0, plain_store=True)
    return {0: (_rows(t, 0), _launch0(cover_tiles=cover_tiles)), 1: (_rows(t, 1), f1)}


@pytest.mark.parametrize("cover, kept", [([2, 0, 2, 2, 2, 2], 2), ([1, 0, 1, 1, 1, 1], 1), ([0] * 6, 0)])
def test_forward_link_launches_are_forward_launch_of_each_launchs_columns(cover, kept):
    # the launch's buffer wait is covered by the largest cover_tiles of its tiles
    t = _link_tiles()
    t.loc[_rows(t, 0), "cover_tiles"] = cover
    want = _want_link(t, kept)
    got = list(forward_link_launches(t, {"host": LINK}))
    assert sorted(int(t["rank"][rows[0]]) for rows, _, _ in got) == [0, 1]
    for rows, f, stall in got:
        want_rows, (wf, wstall) = want[int(t["rank"][rows[0]])]
        # per row of the frame: the same stall and store issue as forward_launch of the launch's columns
        assert dict(zip(rows, stall)) == dict(zip(want_rows, wstall))
        assert dict(zip(rows, f.store_issue_ns)) == dict(zip(want_rows, wf.store_issue_ns))
        assert f.kernel_ns == wf.kernel_ns


def test_forward_link_stall_and_kernels_per_launch():
    t = _link_tiles()
    want_launch = _want_link(t)
    want = np.full(len(t), NAN)
    for rows, (_, stall) in want_launch.values():
        want[rows] = stall
    np.testing.assert_array_equal(forward_link_stall_ns(t, {"host": LINK}), want)
    k = forward_link_kernels(t, {"host": LINK}).sort_values("rank")
    assert list(k.columns) == ["rank", "dump", "kernel_ns", "last_issue_ns"]
    assert k.values.tolist() == [[r, "d", f.kernel_ns, float(np.max(f.store_issue_ns))] for r, (_, (f, _)) in sorted(want_launch.items())]


def test_forward_link_kernels_of_a_one_tile_launch():
    t = _link_tiles()
    one = t[(t["rank"] == 1) & (t["position"] == 0)]
    f, _ = forward_launch([0], [0], [600.0], [12.0], LINK, epilogue_ns=1.0, steps=3, stages=1, cover_tiles=0, plain_store=True)
    assert forward_link_kernels(one, {"host": LINK}).values.tolist() == [[1, "d", f.kernel_ns, float(f.store_issue_ns[0])]]


def test_forward_link_without_a_model_or_tiles_reads_nothing():
    t = _link_tiles()
    assert list(forward_link_launches(t, {})) == [] and list(forward_link_launches(t.iloc[:0], {"host": LINK})) == []
    assert np.isnan(forward_link_stall_ns(t, {"elsewhere": LINK})).all()
    k = forward_link_kernels(t, {})
    assert k.empty and list(k.columns) == ["rank", "dump", "kernel_ns", "last_issue_ns"]
    # without a model no column is read; without tiles neither (a frame of no columns at all)
    assert np.isnan(forward_link_stall_ns(pd.DataFrame({"rank": [0], "dump": ["d"]}), {})).all()
    assert list(forward_link_launches(pd.DataFrame(), {"host": LINK})) == []


@pytest.mark.parametrize("missing, keep, want", [
    ("control_epilogue_ns", {}, dict(epilogue_ns=0.0)),
    ("load_steps", {"load_stages": 1}, dict(steps=1, stages=1)),
    ("load_stages", {}, dict(stages=1)),
    ("cover_tiles", {}, dict(cover_tiles=1)),
    ("plain_store", {}, {}),
    ("operands", {}, {}),
    ("rs_bytes", {}, "no bytes"),
])
def test_forward_link_defaults(missing, keep, want):
    # launch (0, d) without one optional column: forward_launch with its default (no epilogue, one step, one stage,
    # one cover tile, tensor stores, operands not in shared memory, no bytes)
    t = _link_tiles()
    d0 = t[(t["rank"] == 0) & (t["dump"] == "d")].assign(**keep).drop(columns=missing)
    rows = _rows(d0.reset_index(drop=True), 0)
    if want == "no bytes":
        f, stall = forward_launch(_D0["cta"], _D0["position"], 0.0, _D0["compute"], LINK, epilogue_ns=np.array(_D0["epilogue"]),
                                  steps=2, stages=2, cover_tiles=2)
    else:
        f, stall = _launch0(**{**({"stages": 1} if "load_stages" in keep else {}), **want})
    got = np.full(len(d0), NAN)
    got[rows] = stall
    np.testing.assert_array_equal(forward_link_stall_ns(d0.reset_index(drop=True), {"host": LINK}), got)
    assert forward_link_kernels(d0, {"host": LINK})["kernel_ns"].tolist() == [f.kernel_ns]


def test_forward_link_reads_object_columns_with_none_as_numbers():
    # columns of Python objects (None for a missing value) read as float64: a missing epilogue or byte count is 0,
    # a missing control compute the tile's own
    t = _link_tiles()
    d0 = t[(t["rank"] == 0) & (t["dump"] == "d")].reset_index(drop=True)
    obj = d0.copy()
    for c in ("control_compute_ns", "control_epilogue_ns", "rs_bytes"):
        obj[c] = pd.Series([None if pd.isna(v) else v for v in d0[c]], dtype=object)
    assert obj["rs_bytes"].dtype == object and obj["rs_bytes"].isna().sum() == 1
    np.testing.assert_array_equal(forward_link_stall_ns(obj, {"host": LINK}), forward_link_stall_ns(d0, {"host": LINK}))


# ---------------------------------------------------------------- one staging buffer: predicted vs measured store wait


def _sw_tiles(with_control_column: bool = True) -> pd.DataFrame:
    rows = [  # rank, dump, dest, shape, cta, position, tile, mainloop, cover, measured store wait, control
        (0, "c", "local", "S", 0, 0, 0, 100.0, 0.0, 0.0, True), (0, "c", "local", "S", 0, 1, 1, 300.0, 0.0, 0.0, True),
        (0, "c", "local", "S", 1, 0, 2, 200.0, 0.0, 0.0, True), (0, "c2", "device", "T", 0, 0, 0, 50.0, 0.0, 0.0, True),
        (0, "d", "host", "S", 0, 0, 10, 9e9, 250.0, 120.0, False), (0, "d", "host", "S", 0, 1, 11, 9e9, 180.0, 0.0, False),
        (0, "d", "host", "S", 1, 0, 12, 9e9, 200.0, 90.0, False), (0, "d", "host", "S", 1, 1, 13, 9e9, 210.0, NAN, False),
        (0, "q", "host", "S", 0, 1, 40, 9e9, 200.0, 1.0, False), (0, "q", "host", "S", 0, 2, 41, 9e9, 200.0, 2.0, False),
        (1, "d", "host", "T", 0, 0, 20, 9e9, 70.0, 5.0, False),
        (0, "x", "host", "U", 0, 0, 30, 9e9, 70.0, 5.0, False),
    ]
    t = pd.DataFrame(rows, columns=["rank", "dump", "dest", "shape", "cta", "position", "tile", "mainloop_ns", "cover_ns",
                                    "measured_stall_ns", "is_control"])
    return t if with_control_column else t.drop(columns="is_control")


def _sw_bursts() -> pd.DataFrame:
    return pd.DataFrame([(1, "host", "d", 0, 1, 1000.0), (0, "host", "d", 1, 2, 1000.0), (0, "host", "d", 0, 2, 6000.0),
                         (0, "local", "c", 0, 2, 100.0), (0, "host", "x", 0, 1, 100.0), (2, "host", "d", 0, 1, 100.0),
                         (0, "host", "q", 2, 1, 100.0), (0, "host", "q", 1, 2, 6000.0)],
                        columns=["rank", "dest", "dump", "burst", "producers", "volume_bytes"])


def test_store_wait_vs_model_per_tile_by_hand():
    # G per shape: the control's median mainloop (is_control): S median(100, 300, 200) = 200, T 50 (dest "device").
    # Launch (0, host, d), bursts given out of order: burst 0 K 2, V 6000 → B 3000, T0 300, V/R 600:
    # [600 − 200 − 300]₊ = 100; burst 1 is the last: 0. The tile at position n gets burst n's prediction.
    # Launch (0, host, q): only bursts 1 (the same 100) and 2 (the last: 0), its tiles at positions 1 and 2.
    # Launch (1, host, d), shape T: one burst → 0. Left out: the control launch (local: no model), shape U (no
    # control), rank 2's bursts (no tiles). Excess = cover − G: 250 − 200 = 50, −20, 0, 10; 0, 0; 70 − 50 = 20.
    got = store_wait_vs_model(_sw_tiles(), _sw_bursts(), {"host": FWD_MODEL})
    assert list(got.columns) == ["dest", "shape", "dump", "cta", "position", "tile", "gap_ns", "rate_gbps", "predicted_stall_ns",
                                 "store_wait_stall_ns", "mainloop_excess_ns"]
    assert got[["dest", "shape", "dump", "cta", "position", "tile"]].values.tolist() == [
        ["host", "S", "d", 0, 0, 10], ["host", "S", "d", 0, 1, 11], ["host", "S", "d", 1, 0, 12], ["host", "S", "d", 1, 1, 13],
        ["host", "S", "q", 0, 1, 40], ["host", "S", "q", 0, 2, 41], ["host", "T", "d", 0, 0, 20]]
    np.testing.assert_array_equal(got["gap_ns"], [200.0] * 6 + [50.0])
    np.testing.assert_array_equal(got["rate_gbps"], [10.0] * 7)
    np.testing.assert_array_equal(got["predicted_stall_ns"], [100.0, 0.0, 100.0, 0.0, 100.0, 0.0, 0.0])
    np.testing.assert_array_equal(got["store_wait_stall_ns"], [120.0, 0.0, 90.0, NAN, 1.0, 2.0, 5.0])
    np.testing.assert_array_equal(got["mainloop_excess_ns"], [50.0, -20.0, 0.0, 10.0, 0.0, 0.0, 20.0])
    assert got.index.tolist() == list(range(7))


def test_store_wait_vs_model_without_a_control_column_takes_the_local_destination():
    # no is_control: only dest "local" is the control, so shape T (its control stored to "device") has none: rank 1 out
    got = store_wait_vs_model(_sw_tiles(with_control_column=False), _sw_bursts(), {"host": FWD_MODEL})
    assert got["shape"].tolist() == ["S"] * 6 and got["tile"].tolist() == [10, 11, 12, 13, 40, 41]


def test_store_wait_vs_model_without_a_calibrated_launch_is_empty_with_its_columns():
    got = store_wait_vs_model(_sw_tiles(), _sw_bursts(), {"elsewhere": FWD_MODEL})
    assert got.empty and list(got.columns) == ["dest", "shape", "dump", "cta", "position", "tile", "gap_ns", "rate_gbps",
                                               "predicted_stall_ns", "store_wait_stall_ns", "mainloop_excess_ns"]


def test_round_rate_is_the_bytes_before_the_last_round_over_the_first_to_last_start():
    # (0, d): rounds start 0, 10, 30 (given out of order), bytes 100, 200, (999 of the last) → 300 / 30 = 10 B/ns
    # (0, e): one round → no span → NaN; (1, d): the last round starts at the first one's time → NaN, not ∞;
    # (1, e): the last round starts before the first → NaN
    b = pd.DataFrame([(0, "d", 2, 30.0, 999.0), (0, "d", 0, 0.0, 100.0), (0, "d", 1, 10.0, 200.0), (0, "e", 0, 5.0, 10.0),
                      (1, "d", 0, 5.0, 10.0), (1, "d", 1, 5.0, 10.0), (1, "e", 0, 10.0, 10.0), (1, "e", 1, 4.0, 10.0),
                      (2, "d", 0, 0.0, 1.0), (2, "d", 1, 0.5, 9.0)],
                     columns=["rank", "dump", "burst", "start_ns", "volume_bytes"])
    r = round_rate_gbps(b)
    # (2, d): half a nanosecond is a span: 1 / 0.5 = 2
    assert r.index.tolist() == [(0, "d"), (0, "e"), (1, "d"), (1, "e"), (2, "d")]
    np.testing.assert_array_equal(r.to_numpy(), [10.0, NAN, NAN, NAN, 2.0])


def _per_tile() -> pd.DataFrame:
    rows = [  # dest, shape, dump, rate, predicted, measured wait, excess (cases in any order)
        ("host", "T", "d", 5.0, 0.0, 5.0, 1.0),
        ("host", "S", "d", 10.0, 100.0, 150.0, 0.0), ("host", "S", "d", 10.0, 200.0, 100.0, 100.0),
        ("host", "S", "e", 20.0, 300.0, 400.0, 200.0), ("host", "S", "e", 20.0, 400.0, 300.0, 300.0),
        ("host", "S", "z", 99.0, 500.0, NAN, 9.0),  # no measurement: left out, its launch not counted
        ("host", "T", "d", 5.0, 0.0, 7.0, 1.0),
        # two distinct values on one side are not constant: U's waits 5, 5, 7, V's predictions 1, 1, 2
        ("host", "U", "d", 1.0, 1.0, 5.0, 1.0), ("host", "U", "d", 1.0, 2.0, 5.0, 2.0), ("host", "U", "d", 1.0, 3.0, 7.0, 3.0),
        ("host", "V", "d", 1.0, 1.0, 1.0, 1.0), ("host", "V", "d", 1.0, 1.0, 2.0, 2.0), ("host", "V", "d", 1.0, 2.0, 3.0, 3.0),
    ]
    t = pd.DataFrame(rows, columns=["dest", "shape", "dump", "rate_gbps", "predicted_stall_ns", "store_wait_stall_ns",
                                    "mainloop_excess_ns"])
    return t.assign(tile=np.where(np.arange(len(t)) == 1, NAN, 1.0))  # a column the summary does not read, one NaN


def test_store_wait_summary_by_hand():
    # (host, S): 4 tiles, launches d, e; R median(10, 10, 20, 20) = 15; round rates of d 10 and e 30 (f's 1000 is
    # another case's) → 20. Predicted 100..400 ns → median 0.25 µs; waits 150, 100, 400, 300 → median 0.225 µs;
    # excess 0..300 → 0.15 µs; p90s numpy's linear quantile / 1e3.
    # Spearman: predicted ranks 1 2 3 4, waits 2 1 4 3 → Σd² = 4 → 1 − 6·4/(4·15) = 0.6; excess is monotone → 1.
    # MAE: waits |−50|, 100, 100, 100 → 87.5 ns; excess 100 each → 0.1 µs.
    # (host, T): the prediction is constant (0) → ρ NaN.
    bursts = pd.DataFrame([(0, "d", 0, 0.0, 100.0), (0, "d", 1, 10.0, 1.0), (0, "e", 0, 0.0, 300.0), (0, "e", 1, 10.0, 1.0),
                           (0, "f", 0, 0.0, 1e4), (0, "f", 1, 10.0, 1.0)], columns=["rank", "dump", "burst", "start_ns", "volume_bytes"])
    s = store_wait_summary(_per_tile(), bursts).set_index(["dest", "shape"])
    a = s.loc[("host", "S")]
    assert (a["tiles"], a["launches"], a["rate_model_gbps"], a["rate_rounds_gbps"]) == (4, 2, 15.0, 20.0)
    assert (a["pred_median_us"], a["wait_median_us"], a["excess_median_us"]) == (0.25, 0.225, 0.15)
    for name, v in (("pred", [100.0, 200.0, 300.0, 400.0]), ("wait", [150.0, 100.0, 400.0, 300.0]), ("excess", [0.0, 100.0, 200.0, 300.0])):
        assert a[f"{name}_p90_us"] == pytest.approx(np.quantile(v, 0.9) / 1e3, rel=1e-12), name
    assert a["wait_spearman"] == pytest.approx(0.6, rel=1e-12) and a["excess_spearman"] == pytest.approx(1.0, rel=1e-12)
    assert a["wait_mae_us"] == 0.0875 and a["excess_mae_us"] == pytest.approx(0.1, rel=1e-12)
    b = s.loc[("host", "T")]
    assert np.isnan(b["wait_spearman"]) and np.isnan(b["excess_spearman"]) and b["tiles"] == 2 and b["launches"] == 1
    assert b["rate_rounds_gbps"] == 10.0  # d's round rate
    assert s.index.tolist() == [("host", "S"), ("host", "T"), ("host", "U"), ("host", "V")]  # in case order
    # U: ranks of predicted 1 2 3, of waits 1.5 1.5 3: Pearson of the ranks 1.5 / (√2 · √1.5) = √3 / 2; V likewise
    assert s.loc[("host", "U"), "wait_spearman"] == pytest.approx(np.sqrt(3) / 2, rel=1e-12)
    assert s.loc[("host", "U"), "excess_spearman"] == pytest.approx(1.0, rel=1e-12)
    assert s.loc[("host", "V"), "wait_spearman"] == pytest.approx(np.sqrt(3) / 2, rel=1e-12)


def test_store_wait_summary_without_bursts_has_no_round_rate():
    for bursts in (None, pd.DataFrame(columns=["rank", "dump", "burst", "start_ns", "volume_bytes"])):
        s = store_wait_summary(_per_tile(), bursts)
        assert np.isnan(s["rate_rounds_gbps"]).all() and s["tiles"].tolist() == [4, 2, 3, 3]
    assert list(store_wait_summary(_per_tile()).columns) == [
        "dest", "shape", "tiles", "launches", "rate_model_gbps", "rate_rounds_gbps", "pred_median_us", "pred_p90_us", "wait_median_us",
        "wait_p90_us", "excess_median_us", "excess_p90_us", "wait_spearman", "wait_mae_us", "excess_spearman", "excess_mae_us"]


def test_store_wait_summary_rho_with_a_constant_measurement_is_nan():
    t = _per_tile()
    t.loc[(t["shape"] == "S") & t["store_wait_stall_ns"].notna(), "store_wait_stall_ns"] = 7.0  # the unmeasured tile stays out
    a = store_wait_summary(t).set_index(["dest", "shape"]).loc[("host", "S")]
    assert np.isnan(a["wait_spearman"]) and a["excess_spearman"] == pytest.approx(1.0, rel=1e-12)


def test_table3_reads_object_columns_with_none_as_numbers_and_false():
    # a tile table whose number columns hold Python objects (None for a missing value) gives the same Table 3
    t = _table3_tiles()
    obj = t.copy()
    for c in ("mainloop_ns", "control_mainloop_ns", "rs_span_ns", "stall_ns", "noise_ns", "backpressured"):
        obj[c] = pd.Series([None if pd.isna(v) else v for v in t[c]], dtype=object)
    obj.loc[0, "backpressured"] = None  # a missing flag: not backpressured (tile 0 is left out: no destination)
    pd.testing.assert_frame_equal(table3_from_tiles(obj), table3_from_tiles(t))


def test_launch_codes_name_each_rank_dump_pair_in_order_of_first_appearance():
    from xstage_trace.analysis.stall import launch_codes

    # dump "a" on ranks 0 and 1 is two launches; "b" on rank 0 a third; a categorical dump column reads the same
    tiles = pd.DataFrame({"rank": [1, 0, 1, 0, 0, 1], "dump": ["a", "a", "a", "b", "a", "a"]})
    assert launch_codes(tiles).tolist() == [0, 1, 0, 2, 1, 0]
    assert launch_codes(tiles.astype({"dump": "category"})).tolist() == [0, 1, 0, 2, 1, 0]
    # a dump name that is a rank's number joined to another name's text does not collide ("1" on rank 0 vs "" on rank 10)
    odd = pd.DataFrame({"rank": [0, 10, 0], "dump": ["1", "", "1"]})
    assert launch_codes(odd).tolist() == [0, 1, 0]
    # rank 3's "a" and rank 0's "b" are two launches (a rank scaled down by the dump count would meet the dump code)
    assert launch_codes(pd.DataFrame({"rank": [3, 0], "dump": ["a", "b"]})).tolist() == [0, 1]
