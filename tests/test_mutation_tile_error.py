"""Where the per-tile stall error comes from (analysis/tile_error.py, docs/model.md §5, docs/tile-error.md) on a small
hand-built time line with three staging slots, a control run and stores of other CTAs and ranks in flight; every
expected value is worked out by hand in the comments (docs/mutation.md: written against the mutants the older
tile-error tests let through)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.tile_error import backpressured_configurations, concurrent_spans, error_breakdown, error_summary, tail_share, tile_timeline

NAN = np.nan
CFG = {"dest": "host", "shape": "S1", "schedule": "wave", "variant": "v"}
SPAN_COLUMNS = ["rank", "dump", "cta", "position", "wave", "is_l2", "wait_start_ns", "wait_ns", "mainloop_start_ns",
                "mainloop_end_ns", "epilogue_start_ns", "epilogue_span_ns"]


def _spans() -> pd.DataFrame:
    """ns. rank 0, 'run', CTA 0 (S = 3: tile i's slot is reused by tile i + 3):
    p0 L1 wave 0: wait 0+10, mainloop 20–120, local store 130 + 500
    p1 L2 wave 0: wait 125+5, mainloop 140–240, rs 250 + 40
    p2 L2 wave 1: wait 250+10, mainloop 270–370, rs 380 + 30
    p3 L2 wave 1: wait 400+200, mainloop 650–750, rs 760 + 20
    p4 L2 wave 1: wait 760+10, mainloop 780–880, rs 890 + 20
    rank 0, 'run', CTA 1: one L2 tile, rs 250 + 130 (ends at 380, as p2's starts).
    rank 1, 'run', CTA 1, position 1: one L2 tile, rs 250 + 50 (another rank: never in flight with rank 0's).
    rank 0, 'ctrl', CTA 0: six L1 tiles of 100 ns at 0, 110, 220, 330, 460, 570; the reusing tiles' waits begin at
    322, 436, 561 (2, 6, 1 ns after the mainloop before them)."""
    rows = [  # rank, dump, cta, position, wave, l2, wait start, wait, ml_b, ml_e, ep_b, span
        (0, "run", 0, 3, 1, True, 400, 200, 650, 750, 760, 20),
        (0, "run", 0, 0, 0, False, 0, 10, 20, 120, 130, 500),
        (0, "run", 0, 1, 0, True, 125, 5, 140, 240, 250, 40),
        (0, "run", 0, 4, 1, True, 760, 10, 780, 880, 890, 20),
        (0, "run", 0, 2, 1, True, 250, 10, 270, 370, 380, 30),
        (0, "run", 1, 0, 0, True, 0, 10, 20, 120, 250, 130),
        (1, "run", 1, 1, 0, True, 0, 10, 20, 120, 250, 50),
        *((0, "ctrl", 0, k, 0, False, w, 1, b, b + 100, b + 100, 5)
          for k, (b, w) in enumerate([(0, 0), (110, 100), (220, 210), (330, 322), (460, 436), (570, 561)])),
    ]
    s = pd.DataFrame(rows, columns=SPAN_COLUMNS).astype({c: float for c in SPAN_COLUMNS[6:]})
    s["mainloop_ns"] = s["mainloop_end_ns"] - s["mainloop_start_ns"]
    s["rs_ns"] = s["epilogue_span_ns"].where(s["is_l2"])
    s["rs_bytes"] = np.where(s["is_l2"], 6000.0, NAN)
    s["cover_ns"] = s.sort_values("position").groupby(["rank", "dump", "cta"])["mainloop_ns"].transform(
        lambda m: m.shift(-1) + m.shift(-2))  # Σ mainloop(i+1 … i+2)
    return s


def _tiles(spans: pd.DataFrame) -> pd.DataFrame:
    """What the timeline reads of analysis.tiles: predicted and measured stalls given here, noise 20 ns (8 ns for
    p1), and a stale ``epilogue_lead_ns`` that the timeline replaces."""
    t = spans[["rank", "dump", "cta", "position", "epilogue_span_ns", "cover_ns"]].assign(
        rs_span_ns=spans["rs_ns"], tile_kind=np.where(spans["is_l2"], "linear2", "linear1"), is_control=spans["dump"].eq("ctrl"),
        noise_ns=20.0, predicted_stall_ns=300.0, measured_stall_ns=250.0, epilogue_lead_ns=-1e9, **CFG)
    t.loc[(t["dump"] == "run") & (t["position"] == 1) & (t["cta"] == 0), "noise_ns"] = 8.0
    return t


@pytest.fixture
def timeline():
    s = _spans()
    return tile_timeline(s, _tiles(s), slots=3).set_index(["rank", "dump", "cta", "position"]).sort_index()


def test_slot_cycle_terms_with_three_slots_by_hand(timeline):
    run = timeline.loc[(0, "run", 0)]
    # p0 (reused by p3): idle 650 − ml_e(p2) 370 = 280; pre-wait 400 − 370 = 30; post-wait 650 − 400 − 200 = 50;
    # lead 130 − 140 = −10; inner (370 − 140) − cover 200 = 30; wake 650 − (130 + 500) = 20
    # p1 (reused by p4): idle 780 − 750 = 30; pre 760 − 750 = 10; post 780 − 760 − 10 = 10; lead 250 − 270 = −20;
    # inner (750 − 270) − 200 = 280; wake 780 − 290 = 490
    np.testing.assert_allclose(run["mma_idle_ns"], [280, 30, NAN, NAN, NAN])
    np.testing.assert_allclose(run["pre_wait_ns"], [30, 10, NAN, NAN, NAN])
    np.testing.assert_allclose(run["post_wait_ns"], [50, 10, NAN, NAN, NAN])
    np.testing.assert_allclose(run["wake_ns"], [20, 490, NAN, NAN, NAN])
    # p2: lead 380 − 650 = −270, inner (ml_e(p4) 880 − 650) − 200 = 30; p3: lead 760 − 780 = −20; p4: no next tile
    np.testing.assert_allclose(run["epilogue_lead_ns"], [-10, -20, -270, -20, NAN])
    np.testing.assert_allclose(run["inner_idle_ns"], [30, 280, 30, NAN, NAN])
    # handoff = idle − (T_RS − cover): 280 − (500 − 200) = −20; 30 − (40 − 200) = 190
    np.testing.assert_allclose(run["handoff_ns"], [-20, 190, NAN, NAN, NAN])
    # a CTA's tiles never reach into the next CTA or rank: CTA 1's tile (then rank 1's CTA 1) has no next tile
    assert np.isnan(timeline.loc[(0, "run", 1, 0), "epilogue_lead_ns"]) and np.isnan(timeline.loc[(1, "run", 1, 1), "epilogue_lead_ns"])


def test_grouping_keys_with_three_slots_by_hand(timeline):
    run = timeline.loc[(0, "run", 0)]
    assert run["slot_index"].tolist() == [0, 1, 2, 0, 1]  # position mod 3
    assert run["position_in_wave"].tolist() == [0, 1, 0, 1, 2]  # waves 0, 0, 1, 1, 1
    assert run["burst_in_wave"].tolist() == [-1, 0, 0, 1, 2]  # the Linear-1 tile is in no burst; each wave restarts
    assert timeline.loc[(1, "run", 1, 1), "slot_index"] == 1
    # the next CTA (or rank) starts its own run of tiles even in the same wave
    assert timeline.loc[(0, "run", 1, 0), "position_in_wave"] == 0 and timeline.loc[(1, "run", 1, 1), "position_in_wave"] == 0
    assert run["burst_in_wave"].dtype.kind == "i" and run["position_in_wave"].dtype.kind == "i"  # indices, not floats


def test_concurrent_stores_per_rank_and_dump_by_hand(timeline):
    run = timeline.loc[(0, "run", 0)]
    # stores of rank 0's 'run': p1 250–290, p2 380–410, p3 760–780, p4 890–910, CTA 1 250–380. At 250: two starts
    # (p1, CTA 1), no end: 2. At 380: three starts, two ends (290 and CTA 1's 380, which has left): 1. At 760 and 890: 1.
    # Rank 1's store (250–300) is not counted with them; p0's local store is not a remote store.
    np.testing.assert_allclose(run["concurrent_rs"], [NAN, 2, 1, 1, 1])
    assert timeline.loc[(0, "run", 1, 0), "concurrent_rs"] == 2 and timeline.loc[(1, "run", 1, 1), "concurrent_rs"] == 1
    # drain = concurrent · 6000 B / T_RS: 2·6000/40, 6000/30, 6000/20, 6000/20
    np.testing.assert_allclose(run["drain_gbps"], [NAN, 300, 200, 300, 300])


def test_concurrent_spans_skip_spans_without_a_start_or_a_length():
    # dump d: spans 0–10, 5–15, NaN start, 5 + NaN; at 0: 1; at 5: 2 (the NaN ones do not count, their own result NaN)
    got = concurrent_spans(np.array(["d"] * 4), np.zeros(4, int), np.array([0.0, 5.0, NAN, 5.0]), np.array([10.0, 10.0, 3.0, NAN]))
    np.testing.assert_allclose(got, [1, 2, NAN, NAN])


def test_idle_floor_late_waits_and_errors_from_the_median_control_by_hand(timeline):
    # control idles 330 − 320 = 10, 460 − 430 = 30, 570 − 560 = 10: median 10 (mean 16.7); its pre-waits 2, 6, 1: median 2
    assert (timeline["idle_floor_ns"] == 10.0).all()
    run = timeline.loc[(0, "run", 0)]
    np.testing.assert_allclose(run["idle_stall_ns"], [270, 20, NAN, NAN, NAN])
    # late: pre-wait − 2 beyond the noise: p0 28 > 20; p1 8 is not beyond its noise 8; no pre-wait: not late
    assert run["late_wait"].tolist() == [True, False, False, False, False]
    # predicted 300, measured 250 everywhere: error 50; against the idle: 300 − 270 = 30, 300 − 20 = 280; missed 20, −230
    np.testing.assert_allclose(run["error_ns"], 50.0)
    np.testing.assert_allclose(run["idle_error_ns"], [30, 280, NAN, NAN, NAN])
    np.testing.assert_allclose(run["missed_idle_ns"], [20, -230, NAN, NAN, NAN])


def test_without_a_control_idle_the_floor_is_zero_by_hand():
    s = _spans()
    t = _tiles(s)
    # no control run at all: idle stall = the idle itself (280, 30), late = pre-wait beyond the noise (30 > 20; 10 > 8)
    a = tile_timeline(s, t.assign(is_control=False), slots=3).set_index(["rank", "dump", "cta", "position"]).sort_index().loc[(0, "run", 0)]
    assert (a["idle_floor_ns"] == 0.0).all()
    np.testing.assert_allclose(a["idle_stall_ns"], [280, 30, NAN, NAN, NAN])
    assert a["late_wait"].tolist() == [True, True, False, False, False]
    # a control whose tiles never reuse a slot (only its first two tiles): no idle, no pre-wait: floor 0 as well
    short = s[~((s["dump"] == "ctrl") & (s["position"] > 1))]
    b = tile_timeline(short, t.loc[short.index], slots=3)
    assert (b["idle_floor_ns"] == 0.0).all()
    assert b.loc[(b["dump"] == "run") & (b["cta"] == 0) & (b["position"] == 1), "late_wait"].item()  # 10 − 0 > 8


def test_no_spans_or_no_tiles_give_an_empty_timeline():
    s = _spans()
    assert tile_timeline(s.iloc[:0], _tiles(s)).empty and tile_timeline(s, _tiles(s).iloc[:0]).empty


def test_tail_share_rounds_the_tail_and_takes_absolute_errors():
    # 30 tiles: 5 % is 1.5 → 2 tiles (−100 and 50 by magnitude) of 100 + 50 + 28 = 178
    e = pd.Series([-100.0, 50.0] + [1.0] * 28 + [NAN])
    assert tail_share(e) == pytest.approx(150 / 178)
    # 10 tiles: 5 % is 0.5, rounded to 0, at least one: 9 of 18; a fifth: 2 tiles, 10 of 18
    f = pd.Series([9.0, 1.0] + [1.0] * 8)
    assert tail_share(f) == pytest.approx(9 / 18) and tail_share(f, fraction=0.2) == pytest.approx(10 / 18)
    assert np.isnan(tail_share(pd.Series([NAN])))


def _table() -> pd.DataFrame:
    """Five tiles: kinds A, A, B, B, no kind; errors (ns) 1000, −3000, 0, 0, 2000; one tile without an error."""
    return pd.DataFrame({
        "tile_kind": ["A", "A", "B", "B", None, "A"],
        "error_ns": [1000.0, -3000.0, 0.0, 0.0, 2000.0, NAN],
        "idle_error_ns": [2000.0, 0.0, -1000.0, 0.0, 0.0, 5.0],
        "missed_idle_ns": [1000.0, 3000.0, -1000.0, 0.0, 0.0, 5.0],
        "predicted_stall_ns": [300.0, 200.0, 201.0, 0.0, 0.0, 9e9],
        "noise_ns": 200.0,
        "handoff_ns": [4000.0, 8000.0, 6000.0, 1.0, 1.0, 1.0],
        "epilogue_lead_ns": [1000.0, 2000.0, 3000.0, 1.0, 1.0, 1.0],
        "wake_ns": [500.0, 700.0, 900.0, 1.0, 1.0, 1.0],
        "drain_gbps": [10.0, 30.0, NAN, 40.0, 50.0, 99.0],
    })


def test_breakdown_keeps_tiles_without_a_key_and_takes_the_handoff_where_the_slot_stalls_by_hand():
    b = error_breakdown(_table(), ["tile_kind"])
    assert b["tile_kind"].tolist()[:2] == ["A", "B"] and pd.isna(b["tile_kind"].iloc[2])  # sorted, the missing key last
    assert list(b.columns) == ["tile_kind", "tiles", "mae_us", "bias_us", "error_share", "predicted_mean_us", "missed_idle_mean_us",
                               "idle_mae_us", "idle_bias_us", "handoff_median_us", "lead_median_us", "wake_median_us",
                               "drain_median_gbps"]
    a, k, none = (b.iloc[i] for i in range(3))
    # A: errors 1, −3 µs (the NaN one left out): mae 2, bias −1, share 4 / 6; predicted 0.3, 0.2: mean 0.25
    assert (a["tiles"], a["mae_us"], a["bias_us"]) == (2, 2.0, -1.0) and a["error_share"] == pytest.approx(4 / 6)
    assert a["predicted_mean_us"] == pytest.approx(0.25) and a["missed_idle_mean_us"] == pytest.approx(2.0)
    assert a["idle_mae_us"] == pytest.approx(1.0) and a["idle_bias_us"] == pytest.approx(1.0)
    # only the tile predicted 300 > 200 stalls (200 is not above the noise): handoff 4, lead 1, wake 0.5 µs
    assert (a["handoff_median_us"], a["lead_median_us"], a["wake_median_us"]) == pytest.approx((4.0, 1.0, 0.5))
    assert a["drain_median_gbps"] == 20.0
    # B: predicted 201 > 200 on one tile: handoff 6 µs; errors 0: share 0; idle errors −1, 0: mae 0.5, bias −0.5
    assert k["handoff_median_us"] == pytest.approx(6.0) and k["error_share"] == 0.0
    assert (k["idle_mae_us"], k["idle_bias_us"]) == pytest.approx((0.5, -0.5)) and k["drain_median_gbps"] == 40.0
    assert none["tiles"] == 1 and none["error_share"] == pytest.approx(2 / 6) and np.isnan(none["handoff_median_us"])


def test_breakdown_with_no_error_has_no_share():
    t = _table().assign(error_ns=0.0)
    assert error_breakdown(t, ["tile_kind"])["error_share"].isna().all()


def _summary_tiles() -> pd.DataFrame:
    """Configuration P (variant missing: '-'): Linear-2 tiles with remote stores predicted 1000, 2000, 3000, 4000 ns,
    measured 1500, 1000, 2500, 6000 (median 2000 > noise 300: stall-bound), a late wait on the tile of error 2000,
    and a Linear-1 tile (measured 0, predicted 0: in the configuration's rows, not in its verdict).
    Configuration Q: Linear-2 medians 100 / 250 ≤ noise 300 (one tile's noise 200, but the rule takes the largest):
    covered. Configuration N: two Linear-2 tiles without a remote store (medians would be 5000): not judged."""
    p = pd.DataFrame({**CFG, "variant": None, "tile_kind": ["linear2"] * 4 + ["linear1"], "rs_span_ns": [1.0] * 4 + [NAN],
                      "noise_ns": 300.0, "predicted_stall_ns": [1000.0, 2000.0, 3000.0, 4000.0, 0.0],
                      "measured_stall_ns": [1500.0, 1000.0, 2500.0, 6000.0, 0.0],
                      "idle_stall_ns": [1000.0, 2000.0, 3000.0, 4000.0, 0.0], "late_wait": [False, False, False, True, False]})
    q = pd.DataFrame({**CFG, "shape": "S2", "tile_kind": "linear2", "rs_span_ns": 1.0, "noise_ns": [300.0, 200.0],
                      "predicted_stall_ns": 100.0, "measured_stall_ns": 250.0, "idle_stall_ns": 0.0, "late_wait": False})
    n = pd.DataFrame({**CFG, "shape": "S3", "tile_kind": "linear2", "rs_span_ns": [NAN, NAN], "noise_ns": 300.0,
                      "predicted_stall_ns": 5000.0, "measured_stall_ns": 5000.0, "idle_stall_ns": 0.0, "late_wait": False})
    t = pd.concat([p, q, n], ignore_index=True)
    return t.assign(error_ns=t["predicted_stall_ns"] - t["measured_stall_ns"], idle_error_ns=t["predicted_stall_ns"] - t["idle_stall_ns"])


def test_backpressured_configurations_are_the_stall_bound_ones_by_hand():
    t = backpressured_configurations(_summary_tiles())
    assert len(t) == 5 and set(t["shape"]) == {"S1"} and (t["variant"] == "-").all()  # P's five tiles, its Linear-1 one too
    # Q stall-bound once its noise is its smallest (200 < 250): the rule takes the largest noise of a configuration
    q = _summary_tiles().query("shape == 'S2'").assign(noise_ns=200.0)
    assert len(backpressured_configurations(q)) == 2


def test_summary_per_stall_bound_configuration_and_pooled_by_hand():
    s = error_summary(_summary_tiles()).set_index("configuration")
    assert list(s.index) == ["host S1 wave -", "all"]
    r = s.loc["host S1 wave -"]
    # errors vs the wait (µs): −0.5, 1, 0.5, −2 and 0 on the Linear-1 tile: mean |e| 4 / 5 = 0.8, median 0.5
    assert r["tiles_wait"] == 5 and r["mae_wait_us"] == pytest.approx(0.8) and r["median_abs_wait_us"] == pytest.approx(0.5)
    # ranks: predicted 0, 1000, 2000, 3000, 4000 → 1..5; measured 0, 1500, 1000, 2500, 6000 → 1, 3, 2, 4, 5:
    # ρ = 1 − 6·Σd²/(n(n²−1)) = 1 − 6·2/120 = 0.9
    assert r["spearman_wait"] == pytest.approx(0.9) and r["spearman_idle"] == pytest.approx(1.0)
    # 5 tiles: 5 % → 0.25 → one tile: the largest |e| 2 of 4
    assert r["tail5_share_wait"] == pytest.approx(0.5) and np.isnan(r["tail5_share_idle"])  # no idle error at all
    assert r["mae_idle_us"] == 0.0
    # one late tile of five, |error| 2000 of 4000
    assert (r["late_wait_tiles"], r["late_wait_tile_share"], r["late_wait_error_share"]) == (1, 0.2, pytest.approx(0.5))
    assert s.loc["all", "tiles_wait"] == 5 and s.loc["all", "mae_wait_us"] == pytest.approx(0.8)


def test_summary_needs_three_tiles_for_a_rank_correlation_and_an_error_for_a_share():
    t = _summary_tiles()
    two = t[(t["shape"] == "S1") & t["rs_span_ns"].notna()].iloc[[1, 3]]  # predicted 2000, 4000; measured 1000, 6000
    r = error_summary(two).set_index("configuration").loc["all"]
    assert r["tiles_wait"] == 2 and np.isnan(r["spearman_wait"])
    exact = two.assign(error_ns=0.0, idle_error_ns=0.0)
    assert np.isnan(error_summary(exact).set_index("configuration").loc["all", "late_wait_error_share"])
    # a measurement missing on one tile: that tile is left out of the wait's scores only
    gap = t[t["shape"] == "S1"].assign(measured_stall_ns=[1500.0, 1000.0, NAN, 6000.0, 0.0])
    r = error_summary(gap.assign(error_ns=gap["predicted_stall_ns"] - gap["measured_stall_ns"])).set_index("configuration").loc["all"]
    assert r["tiles_wait"] == 4 and r["tiles_idle"] == 5


def test_summary_without_a_stall_bound_configuration_is_empty():
    assert error_summary(_summary_tiles().query("shape != 'S1'")).empty


def test_a_span_that_ends_where_another_starts_has_left_by_hand():
    # spans 0–5 and 5–10 of one dump: at 0 one in flight; at 5 two started, one ended (at 5): 1
    got = concurrent_spans(np.array(["d", "d"]), np.zeros(2, int), np.array([0.0, 5.0]), np.array([5.0, 5.0]))
    np.testing.assert_allclose(got, [1, 1])


def test_tail_share_of_one_tile_or_a_unit_total():
    assert tail_share(pd.Series([3.0])) == 1.0  # one tile carries all of it
    assert tail_share(pd.Series([0.5, 0.5])) == 0.5  # total |error| 1: the worst tile (5 % of 2 → 1) has half


def test_breakdown_groups_in_key_order_and_only_the_kinds_present():
    # rows B before A; a categorical kind with an unused category C: the groups are A, B (sorted), no empty C
    t = _table().iloc[[2, 3, 0, 1]].assign(tile_kind=lambda f: pd.Categorical(f["tile_kind"], categories=["A", "B", "C"]))
    b = error_breakdown(t, ["tile_kind"])
    assert b["tile_kind"].astype(str).tolist() == ["A", "B"] and b["tiles"].tolist() == [2, 2]


def test_a_configuration_predicted_to_stall_without_a_measurement_is_stall_bound():
    # no measured stall; predicted median 500 > noise 300 → stall-bound on the prediction (§5's rule)
    t = pd.DataFrame({**CFG, "tile_kind": "linear2", "rs_span_ns": [1.0, 1.0], "noise_ns": 300.0, "predicted_stall_ns": 500.0,
                      "measured_stall_ns": NAN})
    assert len(backpressured_configurations(t)) == 2


def test_summary_rows_in_configuration_order():
    # a second stall-bound configuration (shape S0) after P in the table comes first among the rows
    t = _summary_tiles()
    s0 = t[t["shape"] == "S1"].assign(shape="S0")
    s = error_summary(pd.concat([t, s0], ignore_index=True))
    assert s["configuration"].tolist() == ["host S0 wave -", "host S1 wave -", "all"]
    assert s.loc[2, "tiles_wait"] == 10


def test_the_controls_own_idle_stall_and_a_tile_without_spans_by_hand(timeline):
    # the control idles 10, 30, 10 against its floor of 10: idle stall 0, 20, 0 (never below 0)
    np.testing.assert_allclose(timeline.loc[(0, "ctrl", 0), "idle_stall_ns"].to_numpy()[:3], [0, 20, 0])
    # a tile of the tile table without spans stays, with no slot-cycle terms
    s = _spans()
    t = _tiles(s)
    extra = t.iloc[[0]].assign(position=99)
    got = tile_timeline(s, pd.concat([t, extra], ignore_index=True), slots=3)
    assert len(got) == len(t) + 1 and np.isnan(got.iloc[-1]["mma_idle_ns"]) and np.isnan(got.iloc[-1]["epilogue_lead_ns"])
