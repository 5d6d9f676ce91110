"""The tile table (analysis/tiles.py, docs/model.md §5, §12) on small hand-made probe records and tile spans whose
answers are worked out by hand in the comments (docs/mutation.md: written against the mutants that the shipped-sample
tests of tests/test_tiles.py and tests/test_diagnosis.py are too slow to run per mutant)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.columnar import text_codes
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.tiles import (CONTROL_KEYS, ControlSample, ControlStats, TileControl, _combined_keys,
                                         _control_lookup, _medians_by, _tile_control_lookup, _wait_stats, compute_stall_ns,
                                         control_sample, control_stats, control_stats_from_samples, finish_tiles,
                                         launch_ns_per_cycle, mainloop_inflated, tile_controls, tile_spans, total_stall_ns,
                                         with_dump_config, _id_counts, _id_ranges, _id_shift)
from xstage_trace.base.lifecycle import TileLifecycle
from xstage_trace.base.schema import TILES

NAN = np.nan
# the reference fused kernel's lifecycle (instrument/lifecycle.py REFERENCE): S = 2, the wait before the reusing mainloop
FUSED = TileLifecycle("fused", ("fused_moe",), store_event="rs", wait_event="slot_wait", local_store_event="ls",
                      info_event="tile_info", slots=2)
# DeepGEMM sm_90's: one staging buffer, waited for after the next tile's mainloop; the info payload is the group
GEMM = TileLifecycle("gemm", ("deepgemm",), store_event="epilogue", wait_event="store_wait", info_event="schedule", slots=1,
                     wait_after_mainloop=True, tile_kind="gemm")
# FlashAttention's: no wait event, the wait is inside the store span; plain stores (as FLUX's)
ATTN = TileLifecycle("attn", ("fa3",), store_event="epilogue", tile_kind="attention", wait_in_store_span=True, plain_stores=True)


def _probes(records: list[tuple], clock: bool = True) -> pd.DataFrame:
    """Probe records (rank, dump, cta, tile, event, kind, payload, t_ns, clock)."""
    p = pd.DataFrame(records, columns=["rank", "dump", "cta", "tile", "event", "kind", "payload", "t_ns", "clock"])
    p["t_ns"] = p["t_ns"].astype(np.float64)
    return p if clock else p.drop(columns="clock")


def _span(rank, dump, cta, tile, event, t0, t1, payload=0, c0=0, c1=0):
    return [(rank, dump, cta, tile, event, "begin", 0, t0, c0), (rank, dump, cta, tile, event, "end", payload, t1, c1)]


def _mark(rank, dump, cta, tile, event, payload):
    return [(rank, dump, cta, tile, event, "mark", payload, 0.0, 0)]


def _fused_records() -> list[tuple]:
    # CTA 0 runs tiles 7, 5, 9 in that order (by mainloop start 0, 1000, 2500; recorded out of order).
    #   tile 7: mainloop 0→800 (400 cycles), info 1 | 3 << 1 | 2 << 16 = 131079 (Linear-2, expert 3, wave 2),
    #           rs 850→2150 (1300 ns, 4096 B), slot wait −50→−20 (30 ns)
    #   tile 5: mainloop 1000→1900 (450 cycles), info 0 | 4 << 1 | 1 << 16 = 65544 (Linear-1, expert 4, wave 1),
    #           ls 1950→2250 (300 ns), slot wait 960→1000 (40 ns)
    #   tile 9: mainloop 2500→3200 (280 cycles), info 1 (Linear-2, expert 0, wave 0), rs 3300→3400 (100 ns, 512 B),
    #           slot wait 2450→2500 (50 ns)
    # CTA 1 runs tile 0 (mainloop 100→600, 250 cycles; nothing else recorded) and tile 11, whose mainloop never ended.
    # An event the lifecycle does not name ("other") is not read.
    r = []
    r += _span(0, "d", 0, 9, "mainloop", 2500, 3200, c0=10_000, c1=10_280) + _mark(0, "d", 0, 9, "tile_info", 1)
    r += _span(0, "d", 0, 9, "rs", 3300, 3400, payload=512) + _span(0, "d", 0, 9, "slot_wait", 2450, 2500)
    r += _span(0, "d", 0, 7, "mainloop", 0, 800, c0=1000, c1=1400) + _mark(0, "d", 0, 7, "tile_info", 131079)
    r += _span(0, "d", 0, 7, "rs", 850, 2150, payload=4096) + _span(0, "d", 0, 7, "slot_wait", -50, -20)
    r += _span(0, "d", 0, 5, "mainloop", 1000, 1900, c0=5000, c1=5450) + _mark(0, "d", 0, 5, "tile_info", 65544)
    r += _span(0, "d", 0, 5, "ls", 1950, 2250) + _span(0, "d", 0, 5, "slot_wait", 960, 1000)
    r += _span(0, "d", 1, 0, "mainloop", 100, 600, c0=0, c1=250) + _span(0, "d", 0, 7, "other", 0, 99_999)
    r += [(0, "d", 1, 11, "mainloop", "begin", 0, 700.0, 0)]
    return r


def _close(got, want):
    np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64))


def test_no_probes_or_no_mainloop_give_an_empty_tile_table():
    assert tile_spans(_probes([]), FUSED).shape == (0, 0)
    assert tile_spans(_probes(_span(0, "d", 0, 0, "rs", 0, 10)), FUSED).shape == (0, 0)


def test_fused_spans_of_one_dump_by_hand():
    s = tile_spans(_probes(_fused_records()), FUSED)
    assert s["cta"].tolist() == [0, 0, 0, 1] and s["tile"].tolist() == [7, 5, 9, 0]  # per CTA in mainloop-start order
    assert s["rank"].tolist() == [0] * 4 and s["dump"].tolist() == ["d"] * 4
    assert s["position"].tolist() == [0, 1, 2, 0]
    _close(s["mainloop_start_ns"], [0, 1000, 2500, 100])
    _close(s["mainloop_end_ns"], [800, 1900, 3200, 600])
    _close(s["mainloop_ns"], [800, 900, 700, 500])
    # ns per cycle: 800/400 = 2, 900/450 = 2, 700/280 = 2.5, 500/250 = 2 → the launch's median 2
    _close(s["ns_per_cycle"], [2.0] * 4)
    assert s["is_l2"].tolist() == [True, False, True, False] and s["is_l2"].dtype == bool  # CTA 1's tile: no info, payload 0
    assert s["expert"].tolist() == [3, 4, 0, 0] and s["wave"].tolist() == [2, 1, 0, 0]
    _close(s["wait_ns"], [30, 40, 50, NAN])
    _close(s["wait_start_ns"], [-50, 960, 2450, NAN])
    _close(s["rs_ns"], [1300, NAN, 100, NAN])
    _close(s["ls_ns"], [NAN, 300, NAN, NAN])
    _close(s["rs_bytes"], [4096, NAN, 512, NAN])
    # S = 2, wait before the mainloop: T_cover(i) = mainloop(i+1) (Eq. 44), the slot wait is tile i+2's
    _close(s["cover_ns"], [900, 700, NAN, NAN])
    _close(s["slot_wait_ns"], [50, NAN, NAN, NAN])
    _close(s["epilogue_span_ns"], [1300, 300, 100, NAN])  # the remote store, else the local one
    _close(s["epilogue_start_ns"], [850, 1950, 3300, NAN])
    # T_lead = store start − the next mainloop's start: 850 − 1000, 1950 − 2500; none after the last tile
    _close(s["epilogue_lead_ns"], [-150, -550, NAN, NAN])
    # Eq. 20: [−150 + 1300 − 900]₊ = 250; [−550 + 300 − 700]₊ = 0; tile 9 has no cover (NaN), CTA 1's tile no store
    _close(s["predicted_stall_ns"], [250, 0, NAN, NAN])
    assert s["cover_tiles"].tolist() == [1] * 4 and s["cover_tiles"].dtype == np.int8
    assert s["wait_in_store"].tolist() == [False] * 4 and s["plain_store"].tolist() == [False] * 4
    assert "tile_kind" not in s


def test_a_slots_argument_overrides_the_lifecycles():
    # S = 1 with the wait before the mainloop: no compute covers a store (T_cover = 0, cover_tiles 0), the slot wait
    # is tile i+1's: [30, 40, 50] → [40, 50, NaN]; Eq. 20 with cover 0: [−150 + 1300]₊ = 1150, [−550 + 300]₊ = 0, tile 9's
    # lead is unknown (0): 100
    s = tile_spans(_probes(_fused_records()), FUSED, slots=1)
    _close(s["cover_ns"], [0, 0, 0, 0])
    assert s["cover_ns"].dtype == np.float64 and s["cover_tiles"].tolist() == [0] * 4
    _close(s["slot_wait_ns"], [40, 50, NAN, NAN])
    _close(s["predicted_stall_ns"], [1150, 0, 100, NAN])


def test_three_slots_cover_with_the_next_two_mainloops():
    # S = 3: T_cover(tile 7) = 900 + 700 = 1600; the others run out of successors (NaN); the wait of tile i+3: none
    s = tile_spans(_probes(_fused_records()), FUSED, slots=3)
    _close(s["cover_ns"], [1600, NAN, NAN, NAN])
    _close(s["slot_wait_ns"], [NAN] * 4)
    assert s["cover_tiles"].tolist() == [2] * 4


def test_gemm_spans_wait_after_the_next_mainloop_and_read_the_group_from_the_info():
    # one CTA, tiles 0, 1, 2 at 0→1000, 1500→2000, 2600→3000, group (info payload) 6, 70000, 3; epilogue (store) spans
    # 1100→1700 (600 ns, 64 B), 2100→2200 (100 ns, 32 B), none; store waits 10, 20, 30 ns.
    # S = 1 with the wait after the next mainloop: cover_tiles = 1 − 1 + 1 = 1, T_cover = mainloop(i+1): 500, 400, NaN;
    # tile i's wait is the one recorded on tile i+1: 20, 30, NaN.
    # lead = 1100 − 1500 = −400, 2100 − 2600 = −500; Eq. 20: [−400 + 600 − 500]₊ = 0 … [−500 + 100 − 400]₊ = 0
    r = []
    # (tile 2's records first: row 0 belongs to the tile without a store)
    for tile, (t0, t1), group, store, wait in [(2, (2600, 3000), 3, None, 30), (0, (0, 1000), 6, (1100, 1700, 64), 10),
                                              (1, (1500, 2000), 70000, (2100, 2200, 32), 20)]:
        r += _span(2, "g", 4, tile, "mainloop", t0, t1) + _mark(2, "g", 4, tile, "schedule", group)
        r += _span(2, "g", 4, tile, "store_wait", t1 + 1, t1 + 1 + wait)
        if store:
            r += _span(2, "g", 4, tile, "epilogue", store[0], store[1], payload=store[2])
    s = tile_spans(_probes(r, clock=False), GEMM)
    _close(s["cover_ns"], [500, 400, NAN])
    _close(s["slot_wait_ns"], [20, 30, NAN])
    _close(s["epilogue_lead_ns"], [-400, -500, NAN])
    _close(s["predicted_stall_ns"], [0, 0, NAN])
    _close(s["rs_bytes"], [64, 32, NAN])
    _close(s["ls_ns"], [NAN] * 3)
    _close(s["epilogue_start_ns"], [1100, 2100, NAN])
    assert s["expert"].tolist() == [6, 70000, 3] and s["wave"].tolist() == [0, 0, 0] and not s["is_l2"].any()
    assert s["tile_kind"].tolist() == ["gemm"] * 3 and s["cover_tiles"].tolist() == [1] * 3
    assert s["is_l2"].dtype == bool and s["wave"].dtype.kind == "i" and s["expert"].dtype.kind == "i"
    _close(s["ns_per_cycle"], [1.0] * 3)  # no clock column: spans compared in ns


def test_attention_spans_have_no_wait_no_cover_and_their_wait_inside_the_store():
    # no wait event, no info event: wait NaN, group 0, kind attention; S = 1 before: T_cover = 0
    # tile 3: mainloop 0→400, store 450→950 (500 ns, 128 B); tile 4: mainloop 600→900, store 1000→1100 (100 ns)
    # lead: 450 − 600 = −150 → [−150 + 500 − 0]₊ = 350; tile 4's unknown lead (0): [100]₊ = 100
    # (the store's end record comes first: row 0 is no info mark, whatever its payload)
    r = _span(0, "a", 0, 3, "epilogue", 450, 950, payload=128)[::-1] + _span(0, "a", 0, 3, "mainloop", 0, 400)
    r += _span(0, "a", 0, 4, "mainloop", 600, 900) + _span(0, "a", 0, 4, "epilogue", 1000, 1100, payload=16)
    s = tile_spans(_probes(r), ATTN)
    _close(s["wait_ns"], [NAN, NAN])
    _close(s["cover_ns"], [0, 0])
    _close(s["predicted_stall_ns"], [350, 100])
    assert s["expert"].tolist() == [0, 0] and s["tile_kind"].tolist() == ["attention"] * 2
    _close(s["rs_bytes"], [128, 16])
    assert s["wait_in_store"].tolist() == [True, True] and s["plain_store"].tolist() == [True, True]
    assert s["cover_tiles"].tolist() == [0, 0]


def test_each_launch_has_its_own_clock_and_ctas_ranks_and_dumps_do_not_cover_each_other():
    # four launches (rank 0 or 1 × dump "a" or "b"), one CTA 0 each with two tiles of 100 and 300 ns at
    # 0.5, 0.6, 0.7, 0.8 ns per cycle. The launch key dump·(max rank + 1) + rank: a-0 → 0, a-1 → 1, b-0 → 2, b-1 → 3.
    r = []
    for (rank, dump), per in zip([(0, "a"), (1, "a"), (0, "b"), (1, "b"), (0, "c")], [0.5, 0.6, 0.7, 0.8, 0.9]):
        r += _span(rank, dump, 0, 1, "mainloop", 0, 100, c1=round(100 / per))  # 200, 167, 143, 125 cycles
        r += _span(rank, dump, 0, 2, "mainloop", 200, 500, c0=1000, c1=1000 + round(300 / per))
    s = tile_spans(_probes(r), FUSED)
    # and a fifth, c-0 → 4 (at 0.9 ns per cycle); ordered by rank, then dump: a-0, b-0, c-0, a-1, b-1
    assert list(zip(s["dump"], s["rank"])) == [("a", 0)] * 2 + [("b", 0)] * 2 + [("c", 0)] * 2 + [("a", 1)] * 2 + [("b", 1)] * 2
    # each launch's median of (100/c₁, 300/c₂): numpy by hand
    want = [np.median([100 / round(100 / p), 300 / round(300 / p)]) for p in (0.5, 0.7, 0.9, 0.6, 0.8)]
    _close(s["ns_per_cycle"], np.repeat(want, 2))
    _close(s["cover_ns"], [300, NAN] * 5)
    assert s["position"].tolist() == [0, 1] * 5


def test_ties_in_mainloop_start_keep_the_record_order_and_categorical_keys_read_as_text():
    # two tiles of one CTA starting at the same time: the merge (record) order stands, tile 8 before tile 2;
    # the dump as a categorical with an unused category
    r = _span(0, "x", 0, 8, "mainloop", 0, 100) + _span(0, "x", 0, 2, "mainloop", 0, 300)
    p = _probes(r)
    p["dump"] = pd.Categorical(p["dump"], categories=["w", "x"])
    s = tile_spans(p, FUSED)
    assert s["tile"].tolist() == [8, 2] and s["dump"].tolist() == ["x", "x"]
    _close(s["cover_ns"], [300, NAN])


def test_launch_clock_is_the_median_ratio_of_the_tiles_that_record_cycles():
    # launch 5: 100/50 = 2, 300/0 (no cycles) → 2; launch 9: 100/25 = 4, 100/50 = 2, −10 cycles (none) → (4 + 2)/2 = 3;
    # launch 1: no cycles at all (NaN, −5) → 1; launch 3: 3 ns in 1 cycle → 3
    launch = np.array([5, 5, 9, 9, 9, 1, 1, 3])
    ns = np.array([100.0, 300.0, 100.0, 100.0, 50.0, 70.0, 80.0, 3.0])
    cycles = np.array([50.0, 0.0, 25.0, 50.0, -10.0, NAN, -5.0, 1.0])
    _close(launch_ns_per_cycle(launch, ns, cycles), [2, 2, 3, 3, 3, 1, 1, 3])
    assert len(launch_ns_per_cycle(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))) == 0


def test_medians_by_key_of_odd_and_even_counts_skip_nan():
    # key 1: [2, 4] → 3; key 3: [5, 1, 9] (NaN skipped) → 5; key 7: only NaN → NaN
    keys, med = _medians_by(np.array([3, 1, 3, 3, 1, 7, 3]), np.array([5.0, 4.0, NAN, 1.0, 2.0, NAN, 9.0]))
    assert keys.tolist() == [1, 3, 7]
    _close(med, [3, 5, NAN])
    keys, med = _medians_by(np.array([4, 4]), np.array([NAN, NAN]))
    assert keys.tolist() == [4] and np.isnan(med).all()
    # −0.0 beside +0.0 (equal values, other bits): taken in input order, as a stable sort leaves them: key 5's middle
    # value of (0.0, −0.0, 0.0) is the −0.0
    keys, med = _medians_by(np.array([5, 5, 5]), np.array([0.0, -0.0, 0.0]))
    assert keys.tolist() == [5] and np.signbit(med[0]) and med[0] == 0.0


@pytest.mark.parametrize("span, n", [(40, 3000), (1 << 40, 3000), (100_000, 300_000), (200_000, 300_000)])
def test_medians_by_key_equal_numpy_per_key_for_narrow_wide_and_many_keys(span, n):
    # keys from a narrow range (a table of the keys present), a range of 2^40 (np.unique), ~95 k and ~155 k distinct
    # keys (over 2^16: codes that 16 bits cannot hold, no radix sort); values with ties and NaN: each key's median is
    # numpy's over its own non-NaN values
    rng = np.random.default_rng(span)
    keys = rng.integers(0, span, n).astype(np.int64) - 7
    values = np.where(rng.random(n) < 0.1, NAN, rng.integers(0, 50, n) * 0.5)
    uniq, med = _medians_by(keys, values)
    assert uniq.tolist() == np.unique(keys).tolist()
    order = np.argsort(keys, kind="stable")
    starts = np.searchsorted(keys[order], uniq)
    groups = np.split(values[order], starts[1:])
    expected = [np.median(g[~np.isnan(g)]) if (~np.isnan(g)).any() else NAN for g in groups[: 2000]]
    assert med[: 2000].tobytes() == np.array(expected).tobytes()


# ---------------------------------------------------------------- finish_tiles: §12 measured stall per tile

def _dumps(rows: list[tuple]) -> pd.DataFrame:
    """dumps rows (rank, dump, dest, shape, operands, is_control); schedule "wave", variant "v"."""
    return pd.DataFrame([{"rank": r, "dump": d, "dest": dest, "shape": shape, "schedule": "wave", "variant": "v", "operands": ops,
                          "is_control": ctrl} for r, d, dest, shape, ops, ctrl in rows])


def _tiles(dump: str, tiles: list[int], mainloop_ns: list[float], slot_wait_ns: list[float], *, period: float = 1.0,
           rs_ns=100.0, epilogue_ns=None, predicted_ns=0.0, **extra) -> pd.DataFrame:
    """tile_spans-shaped rows of one CTA of ``dump`` (rank 0): tile ids, mainloops, slot waits, a clock period."""
    n = len(tiles)
    return pd.DataFrame({
        "rank": 0, "dump": dump, "cta": 0, "tile": tiles, "position": np.arange(n), "mainloop_ns": np.asarray(mainloop_ns, float),
        "is_l2": True, "expert": 0, "wave": 0, "wait_ns": NAN, "rs_ns": rs_ns, "ls_ns": NAN, "cover_ns": 5000.0,
        "slot_wait_ns": np.asarray(slot_wait_ns, float), "epilogue_span_ns": rs_ns if epilogue_ns is None else epilogue_ns,
        "predicted_stall_ns": predicted_ns, "ns_per_cycle": period, **extra})


# Two control launches c1, c2 (local, shape S, global operands), clock period 1 ns (cycles = ns):
#   c1: tile 0 mainloop 1000, epilogue 100, wait 300; tile 1: 2000, 200, wait 300
#   c2: tile 0 mainloop 1100, epilogue 120, wait 300; tile 1: 2000, 200, wait 700
# floor = median(300, 300, 300, 700) = 300; noise = p99 of (0, 0, 0, 400) = 0 + 0.97·400 = 388 (> 200)
# per tile (Eq. 46): tile 0 median 1050 (epilogue 110), tile 1 2000 (epilogue 200); excess over the own id's median
#   (−50, 0, 50, 0) → jitter = p99 = 0 + 0.97·50 = 48.5
# the group (shape S): mainloop p99 of (1000, 1100, 2000, 2000) = 2000 (linear), median (1100 + 2000)/2 = 1550
# Host launch h (period 0.8 ns, Eq. 46a: the control's cycles at 0.8 ns):
#   tile 0: mainloop 1300, wait 300 → w_meas 0; U = (1050 + 48.5)·0.8 = 878.8, 1300 − 878.8 = 421.2 > max(388, 43.94)
#           → inflated, c_meas = 1300 − 1050·0.8 = 460; stall 460; predicted 500 > 388 → backpressured
#   tile 1: mainloop 1700, wait 900 → w_meas 600 > 388 (slot backpressure); U = 2048.5·0.8 = 1638.8, 1700 − 1638.8 = 61.2
#           → not inflated, c_meas 0; stall 600
#   tile 5 (no control tile of that id: the group's 2000 and 1550 at 0.8 → 1600, 1240): mainloop 2100, 500 > 388 →
#           inflated, c_meas = 2100 − 1240 = 860; no wait recorded in a launch that records them → stall NaN;
#           predicted 388 (not above the noise) → not backpressured
NOISE = float(np.percentile([0.0, 0.0, 0.0, 400.0], 99))  # 388 up to rounding (numpy's interpolation)
JITTER = float(np.percentile([-50.0, 0.0, 0.0, 50.0], 99))  # 48.5 up to rounding
CONTROL_DUMPS = [(0, "c1", "local", "S", "global", True), (0, "c2", "local", "S", "global", True),
                 (0, "h", "host", "S", "global", False)]


def _control_run() -> pd.DataFrame:
    return pd.concat([_tiles("c1", [0, 1], [1000, 2000], [300, 300], epilogue_ns=[100.0, 200.0]),
                      _tiles("c2", [0, 1], [1100, 2000], [300, 700], epilogue_ns=[120.0, 200.0]),
                      _tiles("h", [0, 1, 5], [1300, 1700, 2100], [300, 900, NAN], period=0.8, predicted_ns=[500.0, 0.0, NOISE],
                             epilogue_lead_ns=[-5.0, -6.0, NAN])], ignore_index=True)


def test_finish_tiles_of_an_empty_table_is_empty():
    assert finish_tiles(pd.DataFrame(), _dumps(CONTROL_DUMPS)).empty


def test_measured_stall_against_the_per_tile_control_at_the_tiles_clock_by_hand():
    t = finish_tiles(_control_run(), _dumps(CONTROL_DUMPS))
    h = t[t["dump"] == "h"]
    assert list(t.columns) == TILES.names
    _close(t["wait_floor_ns"], [300] * 7)
    _close(t["noise_ns"], [NOISE] * 7)
    _close(h["measured_stall_ns"], [0, 600, NAN])
    _close(h["control_mainloop_ns"], [(1050 + JITTER) * 0.8, (2000 + JITTER) * 0.8, 1600])
    _close(h["control_compute_ns"], [840, 1600, 1240])
    _close(h["control_epilogue_ns"], [110, 200, NAN])
    _close(h["compute_stall_ns"], [460, 0, 860])
    _close(h["stall_ns"], [460, 600, NAN])
    assert h["backpressured"].tolist() == [True, True, False]
    assert h["diagnosis"].tolist() == ["mainloop_inflation", "slot_backpressure", "mainloop_inflation"]
    _close(h["epilogue_lead_ns"], [-5, -6, NAN])
    _close(h["ns_per_cycle"], [0.8] * 3)


def test_control_tiles_are_judged_against_their_own_statistics():
    # c1 tile 0: 1000 vs U = 1098.5 → not inflated, c_meas 0, wait 300 → 0; c2 tile 0: 1100 − 1098.5 = 1.5 → not inflated;
    # c2 tile 1: wait 700 → w_meas 400 > 388 → slot backpressure (measured above the noise)
    t = finish_tiles(_control_run(), _dumps(CONTROL_DUMPS))
    c = t[t["dump"] != "h"]
    _close(c["measured_stall_ns"], [0, 0, 0, 400])
    _close(c["compute_stall_ns"], [0, 0, 0, 0])
    _close(c["stall_ns"], [0, 0, 0, 400])
    assert c["backpressured"].tolist() == [False, False, False, True]
    assert c["diagnosis"].tolist() == ["none", "none", "none", "slot_backpressure"]
    assert c["dest"].tolist() == ["local"] * 4 and c["tile_kind"].tolist() == ["linear2"] * 4


def test_the_run_s_control_statistics_and_noise_can_come_from_elsewhere():
    # a streaming analyze finishes the host launch alone with the run's control statistics: the same numbers as above
    dumps = _dumps(CONTROL_DUMPS)
    run = _control_run()
    ctrl = control_stats(with_dump_config(run, dumps))
    h = finish_tiles(run[run["dump"] == "h"], dumps, control=ctrl)
    _close(h["compute_stall_ns"], [460, 0, 860])
    _close(h["measured_stall_ns"], [0, 600, NAN])
    # a noise of 500 ns given: tile 1's w_meas 600 still above it; tile 0's 421.2 over U is not inflated any more;
    # tile 5's 500 over U neither (not above 500); the prediction 500 is not above 500
    h = finish_tiles(run[run["dump"] == "h"], dumps, noise_ns=500.0, control=ctrl)
    _close(h["noise_ns"], [500] * 3)
    _close(h["compute_stall_ns"], [0, 0, 0])
    assert h["backpressured"].tolist() == [False, True, False]
    assert h["diagnosis"].tolist() == ["none", "slot_backpressure", "none"]


def test_without_a_control_nothing_is_measured_and_the_noise_is_the_minimum():
    # no control launch: the floor is unknown (w_meas NaN, never the raw wait), C is not judged; noise 200;
    # the prediction 300 > 200 → backpressured; nothing measured → diagnosis none
    dumps = _dumps([(0, "h", "host", "S", "global", False)])
    t = finish_tiles(_tiles("h", [0, 1], [1000, 1000], [900, NAN], predicted_ns=[300.0, 200.0]), dumps)
    _close(t["measured_stall_ns"], [NAN, NAN])
    _close(t["wait_floor_ns"], [NAN, NAN])
    _close(t["noise_ns"], [200.0] * 2)
    _close(t["compute_stall_ns"], [NAN, NAN])
    _close(t["stall_ns"], [NAN, NAN])
    _close(t["control_mainloop_ns"], [NAN, NAN])
    assert t["backpressured"].tolist() == [True, False] and t["diagnosis"].tolist() == ["none", "none"]
    _close(t["epilogue_lead_ns"], [NAN, NAN])  # spans without a lead column


def test_forward_inputs_default_without_their_columns_and_follow_the_schema_types():
    dumps = _dumps([(0, "h", "host", "S", "global", False)])
    t = finish_tiles(_tiles("h", [0], [1000], [NAN]).drop(columns="ns_per_cycle"), dumps)
    _close(t["rs_bytes"], [NAN])
    assert t["rs_bytes"].dtype == np.float64
    assert t["load_steps"].tolist() == [1] and t["load_stages"].tolist() == [1] and t["cover_tiles"].tolist() == [1]
    assert t["plain_store"].tolist() == [False] and t["plain_store"].dtype == bool
    for c in ("load_steps", "load_stages", "cover_tiles"):
        assert t[c].dtype == np.int32, c  # base.schema.TILES
    _close(t["ns_per_cycle"], [1.0])
    t = finish_tiles(_tiles("h", [0], [1000], [NAN], rs_bytes=64, load_steps=3, load_stages=2, cover_tiles=np.int8(0),
                            plain_store=1), dumps)  # integer bytes and a 0/1 flag: the schema's float64 and bool
    assert t["rs_bytes"].dtype == np.float64 and t["plain_store"].dtype == bool
    _close(t["rs_bytes"], [64])
    assert t["load_steps"].tolist() == [3] and t["load_stages"].tolist() == [2] and t["cover_tiles"].tolist() == [0]
    assert t["plain_store"].tolist() == [True]
    for c in ("load_steps", "load_stages", "cover_tiles"):
        assert t[c].dtype == np.int32, c  # base.schema.TILES


def test_the_recurrence_predicts_launches_of_on_chip_operands_from_the_control_compute():
    # docs/model.md §12 forward prediction, §4 (Eq. 1): one host CTA of two store tiles of 1000 B each (rounds of K = 1,
    # B = 1000): T_iss^0 = 100 ns, R = 1000 GB/s → V/R = 1 ns, ΔT_iss = [1 − G − 100]₊ = 0, so T_iss = 100 per round.
    # The offered compute is the control's (300, 60 ns), never the host's own (400, 5000): T_cover^0(tile 0) = 60
    # → [100 − 60]₊ = 40; tile 1 has no cover (NaN). The control launch (dest local) has no model: NaN.
    dumps = _dumps([(0, "c", "local", "S", "smem", True), (0, "h", "host", "S", "smem", False)])
    run = pd.concat([_tiles("c", [0, 1], [300, 60], [NAN, NAN]), _tiles("h", [0, 1], [400, 5000], [NAN, NAN], rs_bytes=1000.0)],
                    ignore_index=True)
    model = PlatformModel(rate_gbps=1000.0, issue_floor_ns={(1, 1000): 100.0})
    t = finish_tiles(run, dumps, models={"host": (model, None)})
    _close(t["forward_stall_ns"], [NAN, NAN, 40, NAN])
    _close(finish_tiles(run, dumps)["forward_stall_ns"], [NAN] * 4)  # no calibration: no prediction


def test_the_link_model_predicts_launches_of_global_operands_from_the_control_compute_and_epilogue():
    # docs/model.md §11/§12: with a path-drain link model and operands in global memory the prediction is
    # forward_launch of the launch's CTAs, positions and bytes with the control's compute (300, 60, 250, 60 ns: the
    # per-tile control at period 1) and epilogue spans (10, 20, 100, 100) — not the host's own (400, 5000, 200, 5000
    # and 5, 5, 5, 5) — and the one cover tile
    from xstage_trace.analysis.forward import LinkModel, forward_launch

    dumps = _dumps([(0, "c", "local", "S", "global", True), (0, "h", "host", "S", "global", False)])
    where = dict(cta=[0, 0, 1, 1], position=[0, 1, 0, 1])
    run = pd.concat([_tiles("c", [0, 1, 2, 3], [300, 60, 250, 60], [NAN] * 4, epilogue_ns=[10.0, 20.0, 100.0, 100.0], cover_tiles=1,
                            **where),
                     _tiles("h", [0, 1, 2, 3], [400, 5000, 200, 5000], [NAN] * 4, epilogue_ns=5.0, rs_bytes=10_000.0,
                            cover_tiles=1, **where)], ignore_index=True)
    link = LinkModel(rate_gbps=50.0, capacity_bytes=400.0, load_latency_ns=4.0, issue_floor_ns=2.0)
    model = PlatformModel(rate_gbps=1000.0, issue_floor_ns={(2, 10_000): 100.0})
    _, want = forward_launch(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.full(4, 10_000.0), np.array([300.0, 60.0, 250.0, 60.0]),
                             link, epilogue_ns=np.array([10.0, 20.0, 100.0, 100.0]), steps=np.ones(4, np.int64),
                             stages=np.ones(4, np.int64), cover_tiles=1, plain_store=False)
    t = finish_tiles(run, dumps, models={"host": (model, link), "local": (model, None)})
    _close(t["forward_stall_ns"].iloc[4:], want)
    _close(t["forward_stall_ns"].iloc[:4], [NAN] * 4)  # the control: global operands, no link model, a platform model …
    # … whose recurrence needs store tiles with bytes: none known there (rs_bytes NaN) gives NaN too


def test_a_wait_inside_the_store_span_is_the_span_beyond_the_control_median_where_beyond_its_spread():
    # Eq. 45 for a wait inside the store span; no slot waits anywhere → noise 200 (MIN_NOISE_NS), floor unknown.
    # shape A: control spans 100, 100, 100, 300 → median 100, p99 294 (0.97·200 + 100, up to rounding): 5 % of it is
    #   14.7 < 200, so a span is longer where it exceeds 294 + 200: 600 → 600 − 100 = 500; 450 → 0
    # shape B: control spans 10000 ×4 → median = p99 = 10000; 5 % = 500 > 200: 10600.0126 → 600.013 (to the ps),
    #   10400 → 0, 10500 (exactly 500 beyond: not longer) → 0
    # shape C: no control → NaN; a tile without a wait inside its store (a dump of another lifecycle) keeps its
    #   slot wait's measurement: NaN without control waits
    dumps = _dumps([(0, "ca", "local", "A", "smem", True), (0, "ha", "host", "A", "smem", False),
                    (0, "cb", "local", "B", "smem", True), (0, "hb", "host", "B", "smem", False),
                    (0, "hc", "host", "C", "smem", False), (0, "hd", "host", "D", "smem", False)])
    tiles = [_tiles("ca", [0, 1, 2, 3], [1000] * 4, [NAN] * 4, rs_ns=[100.0, 100.0, 100.0, 300.0]),
             _tiles("ha", [0, 1], [1000] * 2, [NAN] * 2, rs_ns=[600.0, 450.0]),
             _tiles("cb", [0, 1, 2, 3], [1000] * 4, [NAN] * 4, rs_ns=10_000.0),
             _tiles("hb", [0, 1, 2], [1000] * 3, [NAN] * 3, rs_ns=[10_600.0126, 10_400.0, 10_500.0]),
             _tiles("hc", [0], [1000], [NAN], rs_ns=900.0)]
    run = pd.concat([s.assign(wait_in_store=True) for s in tiles] + [_tiles("hd", [0], [1000], [1000.0]).assign(wait_in_store=False)],
                    ignore_index=True)
    t = finish_tiles(run, dumps).set_index("dump")
    _close(t.loc["ha", "measured_stall_ns"], [500, 0])
    np.testing.assert_allclose(t.loc["hb", "measured_stall_ns"], [600.013, 0, 0], rtol=0, atol=1e-9)
    _close(t.loc[["hc"], "measured_stall_ns"], [NAN])
    _close(t.loc[["hd"], "measured_stall_ns"], [NAN])
    _close(t.loc["ca", "measured_stall_ns"], [0, 0, 0, 0])
    # the measured stall above the noise is a slot backpressure: 500 and 600 (> 200)
    assert t.loc["ha", "diagnosis"].tolist() == ["slot_backpressure", "none"]
    assert t.loc["hb", "diagnosis"].tolist() == ["slot_backpressure", "none", "none"]


def test_a_launch_that_records_waits_leaves_its_last_tiles_unmeasured_but_another_launch_does_not():
    # launch h records a wait for tile 0 only: tile 1's stall is NaN (no successor recorded its wait); launch g records
    # none at all: its tile's stall is its compute part (0, a mainloop at the control's), as the wait part is NaN
    dumps = _dumps([(0, "c", "local", "S", "smem", True), (0, "h", "host", "S", "smem", False), (0, "g", "host", "S", "smem", False)])
    run = pd.concat([_tiles("c", [0, 1], [1000, 1000], [300, 300]), _tiles("h", [0, 1], [1000, 1000], [800, NAN]),
                     _tiles("g", [0], [1000], [NAN])], ignore_index=True)
    t = finish_tiles(run, dumps).set_index("dump")
    _close(t.loc["h", "stall_ns"], [500, NAN])
    _close(t.loc[["g"], "stall_ns"], [0])
    _close(t.loc[["g"], "measured_stall_ns"], [NAN])


def test_measured_stall_is_rounded_to_picoseconds_and_clipped_at_zero():
    # floor 300 (one control wait); waits 300.0000001 → 0.0000001 rounds to 0; 250 → −50 clipped to 0; 300.0126 → 0.013
    dumps = _dumps([(0, "c", "local", "S", "smem", True), (0, "h", "host", "S", "smem", False)])
    run = pd.concat([_tiles("c", [0], [1000], [300.0]), _tiles("h", [0, 1, 2], [1000] * 3, [300.0000001, 250.0, 300.0126])],
                    ignore_index=True)
    t = finish_tiles(run, dumps)
    _close(t["measured_stall_ns"].iloc[1:], [0, 0, 0.013])


# ---------------------------------------------------------------- the dump configuration of each tile

def _spans_of(pairs: list[tuple]) -> pd.DataFrame:
    """Minimal spans: (rank, dump, is_l2) per tile."""
    return pd.DataFrame({"rank": [r for r, _, _ in pairs], "dump": [d for _, d, _ in pairs], "is_l2": [k for _, _, k in pairs],
                         "tile": np.arange(len(pairs))})


def test_dump_config_is_looked_up_by_rank_and_dump():
    # ranks 3 and 5 both ran dumps "a" and "b"; (5, "a") is the control; (3, "z") has no dump row: no configuration,
    # not a control. The tile kind comes from is_l2 (Linear-2 / Linear-1)
    dumps = pd.DataFrame([{"rank": r, "dump": d, "dest": dest, "shape": f"s{r}{d}", "schedule": "wave", "variant": "v", "operands": "smem",
                           "is_control": ctrl} for r, d, dest, ctrl in
                          [(3, "a", "host", False), (5, "a", "local", True), (3, "b", "peer", False), (5, "b", "host", False)]])
    t = with_dump_config(_spans_of([(5, "a", True), (3, "a", False), (5, "b", True), (3, "b", True), (3, "z", False)]), dumps)
    assert t["dest"].tolist()[:4] == ["local", "host", "host", "peer"] and pd.isna(t["dest"].iloc[4])
    assert t["shape"].tolist()[:4] == ["s5a", "s3a", "s5b", "s3b"]
    assert t["is_control"].tolist() == [True, False, False, False, False]
    assert t["tile_kind"].tolist() == ["linear2", "linear1", "linear2", "linear2", "linear1"]
    assert t["tile"].tolist() == [0, 1, 2, 3, 4]


def test_a_dump_row_repeated_gives_every_match_and_a_missing_dump_is_no_control():
    # (0, "a") twice in the dumps (pandas' merge: each tile of it once per match); (0, "q") missing
    dumps = pd.DataFrame([{"rank": 0, "dump": "a", "dest": dest, "shape": "s", "schedule": "wave", "variant": "v", "operands": "smem",
                           "is_control": ctrl} for dest, ctrl in [("local", True), ("host", False)]])
    t = with_dump_config(_spans_of([(0, "a", True), (0, "q", False)]), dumps)
    assert t["dump"].tolist() == ["a", "a", "q"] and t["dest"].tolist()[:2] == ["local", "host"]
    assert t["is_control"].tolist() == [True, False, False] and t["is_control"].dtype == bool
    assert t["tile_kind"].tolist() == ["linear2", "linear2", "linear1"]


def test_a_layouts_own_tile_kind_stands_and_missing_ones_come_from_is_l2():
    dumps = _dumps([(0, "a", "host", "s", "smem", False)])
    spans = _spans_of([(0, "a", True), (0, "a", False)]).assign(tile_kind=["gemm", None])
    spans.index = [7, 3]  # filled by index, not by position
    t = with_dump_config(spans, dumps)
    assert t["tile_kind"].tolist() == ["gemm", "linear1"]
    t = with_dump_config(_spans_of([(0, "a", True)]), dumps.iloc[:0])  # no dump rows at all
    assert pd.isna(t["dest"].iloc[0]) and t["is_control"].tolist() == [False]


# ---------------------------------------------------------------- control samples and statistics (§5, §12)

def _control_frame() -> pd.DataFrame:
    # five tiles; the control ones are rows 0, 1, 3, 4. Row 1 has no shape (a group of its own), row 4 a NaN mainloop
    # (dropped from the mainloops and the per-tile control) and a NaN wait (dropped from the waits).
    # mainloops at 0.5 ns per cycle for rows 0-2, 2 for rows 3-4: cycles 2000, 600, (row 2 not control), 400, NaN
    return pd.DataFrame({"is_control": [True, True, False, True, True], "shape": ["S", None, "S", "S", "S"],
                         "tile_kind": ["linear2"] * 5, "operands": ["smem"] * 5, "tile": [4, 4, 4, 1, 4],
                         "mainloop_ns": [1000.0, 300.0, 99.0, 800.0, NAN], "ns_per_cycle": [0.5, 0.5, 0.5, 2.0, 2.0],
                         "slot_wait_ns": [10.0, 20.0, 30.0, 40.0, NAN], "rs_ns": [5.0, NAN, 7.0, 6.0, 8.0],
                         "epilogue_span_ns": [50.0, 60.0, 70.0, 80.0, 90.0]})


def test_control_sample_keeps_the_control_tiles_values_per_group_in_cycles():
    s = control_sample(_control_frame())
    _close(s.waits_ns, [10, 20, 40])
    assert set(s.mainloops_cycles) == {("S", "linear2", "smem"), (None, "linear2", "smem")}
    _close(s.mainloops_cycles[("S", "linear2", "smem")], [2000, 400])
    _close(s.mainloops_cycles[(None, "linear2", "smem")], [600])
    _close(s.stores_ns[("S", "linear2", "smem")], [5, 6, 8])  # row 4's store is kept although its mainloop is NaN
    _close(s.stores_ns[(None, "linear2", "smem")], [])
    tile, ml, ep = s.tiles[("S", "linear2", "smem")]
    assert tile.tolist() == [4, 1]
    _close(ml, [2000, 400])
    _close(ep, [50, 80])


def test_control_sample_reads_a_finished_tables_store_column_and_does_without_tiles_and_epilogues():
    # a finished tile table names the store span rs_span_ns; without tile ids there is no per-tile control; without
    # an epilogue column the per-tile epilogues are NaN; without ns_per_cycle the spans are taken in ns
    f = _control_frame().rename(columns={"rs_ns": "rs_span_ns"}).drop(columns=["epilogue_span_ns", "ns_per_cycle"])
    s = control_sample(f)
    _close(s.stores_ns[("S", "linear2", "smem")], [5, 6, 8])
    _close(s.mainloops_cycles[("S", "linear2", "smem")], [1000, 800])
    _close(s.tiles[("S", "linear2", "smem")][2], [NAN, NAN])
    s = control_sample(f.drop(columns=["tile", "rs_span_ns"]))
    assert s.tiles == {}
    _close(s.stores_ns[("S", "linear2", "smem")], [])


def test_control_statistics_per_group_missing_keys_first_by_hand():
    # waits 10, 20, 40: floor 20, noise max(p99 of (−10, 0, 20), 200) = 200
    # group (None, linear2, smem): mainloop 600 → p99 = median = 600, no store spans → NaN
    # group (S, linear2, smem): mainloops 2000, 400 → p99 = 400 + 0.99·1600 = 1984 (linear), median 1200;
    #   stores 5, 6, 8 → median 6, p99 = 6 + 0.98·2 = 7.96
    c = control_stats(_control_frame())
    assert c.floor_ns == 20.0 and c.noise_ns == 200.0 and c.waits == 3
    p = c.mainloop_p99
    assert list(p.columns) == [*CONTROL_KEYS, "ctrl", "ctrl_median", "ctrl_store_median", "ctrl_store_p99"]
    assert pd.isna(p["shape"].iloc[0]) and p["shape"].iloc[1] == "S" and p["tile_kind"].tolist() == ["linear2"] * 2
    np.testing.assert_allclose(p["ctrl"], [600, 1984], rtol=1e-12)
    _close(p["ctrl_median"], [600, 1200])
    _close(p["ctrl_store_median"], [NAN, 6])
    np.testing.assert_allclose(p["ctrl_store_p99"], [NAN, 7.96], rtol=1e-12)
    assert p["ctrl"].dtype == np.float64 and p["ctrl_store_median"].dtype == np.float64
    # the per-tile control of group S: tile 1 → 400 cycles, tile 4 → 2000 (epilogues 80, 50), one value per id: jitter 0
    tc = c.per_tile[("S", "linear2", "smem")]
    assert tc.tile.tolist() == [1, 4] and tc.jitter_cycles == 0.0
    _close(tc.mainloop_cycles, [400, 2000])
    _close(tc.epilogue_ns, [80, 50])


def test_control_statistics_of_noisy_waits_and_of_no_control():
    # waits 0, 0, 100, 1000: floor 50, corrected (−50, −50, 50, 950) → p99 = 50 + 0.97·900 = 923 (numpy, up to rounding)
    f = _control_frame().iloc[:4].assign(is_control=True, slot_wait_ns=[0.0, 0.0, 100.0, 1000.0])
    c = control_stats(f)
    assert c.floor_ns == 50.0 and c.noise_ns == float(np.percentile([-50.0, -50.0, 50.0, 950.0], 99)) and c.waits == 4
    c = control_stats(_control_frame().assign(is_control=False))
    assert (c.floor_ns, c.noise_ns, c.waits) == (0.0, 200.0, 0) and c.mainloop_p99.empty and c.per_tile == {}
    assert list(c.mainloop_p99.columns) == [*CONTROL_KEYS, "ctrl", "ctrl_median", "ctrl_store_median", "ctrl_store_p99"]


def test_wait_stats_by_hand():
    # no wait: (0, 200); ranks of waits 100, 300, 500 (sorted order statistics 0, 1, 2): floor 300,
    # p99 of (−200, 0, 200) = 0 + 0.98·200 = 196 → 200; of waits 0, 1000, 2000: floor 1000, p99 = 980 (up to rounding)
    assert _wait_stats({}, 0) == (0.0, 200.0)
    assert _wait_stats({0: 100.0, 1: 300.0, 2: 500.0}, 3) == (300.0, 200.0)
    assert _wait_stats({0: 0.0, 1: 1000.0, 2: 2000.0}, 3) == (1000.0, float(np.percentile([-1000.0, 0.0, 1000.0], 99)))


def test_control_statistics_of_several_samples_are_those_of_their_union_held_in_pieces():
    # the same five tiles split into two samples, a cap of one value at once: the same numbers as control_stats
    f = _control_frame()
    whole = control_stats(f)
    parts = control_stats_from_samples(lambda: (control_sample(f.iloc[:2]), control_sample(f.iloc[2:])), 1)
    assert (parts.floor_ns, parts.noise_ns, parts.waits) == (whole.floor_ns, whole.noise_ns, whole.waits)
    pd.testing.assert_frame_equal(parts.mainloop_p99, whole.mainloop_p99)
    tc = parts.per_tile[("S", "linear2", "smem")]
    assert tc.tile.tolist() == [1, 4]
    _close(tc.mainloop_cycles, [400, 2000])


def test_tile_controls_take_medians_per_id_over_every_sample_and_the_p99_of_the_excess():
    # group g: sample 1 tiles 0, 1 (1000, 2000 cycles, epilogues 100, NaN), sample 2 tiles 0, 1 (1100, 2000; 120, 200)
    # → medians 1050, 2000; epilogues 110, 200 (NaN skipped); excess (−50, 0, 50, 0) → p99 48.5 (numpy)
    # group e has no tile: left out
    g, e = ("S", "linear2", "smem"), ("T", "linear2", "smem")
    empty = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    s1 = ControlSample(np.zeros(0), {}, {}, {e: empty, g: (np.array([0, 1]), np.array([1000.0, 2000.0]), np.array([100.0, NAN]))})
    s2 = ControlSample(np.zeros(0), {}, {}, {g: (np.array([0, 1]), np.array([1100.0, 2000.0]), np.array([120.0, 200.0]))})
    out = tile_controls(lambda: iter([s1, s2]))
    assert set(out) == {g}
    tc = out[g]
    assert tc.tile.tolist() == [0, 1] and tc.jitter_cycles == float(np.percentile([-50.0, 0.0, 50.0, 0.0], 99))
    _close(tc.mainloop_cycles, [1050, 2000])
    _close(tc.epilogue_ns, [110, 200])


def _random_samples(seed: int, launches: int, ids: int):
    rng = np.random.default_rng(seed)
    g, h = ("S", "linear2", "smem"), ("S", "linear1", "smem")
    out = []
    for _ in range(launches):
        tile = rng.permutation(ids).astype(np.int64) * 37  # ids 0, 37, 74, … (not dense)
        mainloop = rng.normal(1000.0, 50.0, ids).round(1)  # rounded: ties within an id
        epilogue = np.where(rng.random(ids) < 0.2, NAN, rng.normal(100.0, 5.0, ids))
        out.append(ControlSample(np.zeros(0), {}, {}, {g: (tile, mainloop, epilogue), h: (tile[:3], mainloop[:3], epilogue[:3])}))
    return out


@pytest.mark.parametrize("cap", [1, 7, 50, 199, 200])
def test_tile_controls_under_a_cap_give_every_number_of_all_values_at_once(cap):
    # 9 launches of 39 ids: 351 values of group g (the p99's virtual index 346.5: numpy interpolates from the upper
    # value there), 27 of group h; a cap of 1 … 200 cuts g's ids into ranges (and h's under a cap of 1 … 7) and takes
    # the p99 of the excess from order statistics: every array bit for bit the same
    samples = _random_samples(6, 9, 39)
    whole, capped = tile_controls(lambda: iter(samples)), tile_controls(lambda: iter(samples), cap)
    assert list(capped) == list(whole)
    for key, tc in whole.items():
        got = capped[key]
        assert got.tile.tolist() == tc.tile.tolist()
        assert got.mainloop_cycles.tobytes() == tc.mainloop_cycles.tobytes()
        assert got.epilogue_ns.tobytes() == tc.epilogue_ns.tobytes()
        assert got.jitter_cycles == tc.jitter_cycles
    # the per-id medians by hand (numpy over one id's values) and the p99 by numpy over every excess
    g = ("S", "linear2", "smem")
    t = np.concatenate([s.tiles[g][0] for s in samples])
    m = np.concatenate([s.tiles[g][1] for s in samples])
    med = np.array([np.median(m[t == i]) for i in np.unique(t)])
    assert capped[g].mainloop_cycles.tolist() == med.tolist()
    assert capped[g].jitter_cycles == max(float(np.percentile(m - med[np.searchsorted(np.unique(t), t)], 99)), 0.0)


@pytest.mark.parametrize("first_id, stride, cap", [(70_000, 1, 30), (70_000, 37, 50), (5, 37_000, 40), (5, 37_000, 200)])
def test_tile_controls_hold_at_most_the_cap_of_values_of_a_group_at_once(monkeypatch, first_id, stride, cap):
    # 9 launches of 39 ids (9 values per id; ids from 70 000 in steps of 1 or 37, or spanning 1.4 M ids: bins of 32),
    # the third launch without group g: every median is taken over at most `cap` values at once (no id holds more),
    # and the result is that of every value at once
    import xstage_trace.analysis.tiles as tiles_module

    g = ("S", "linear2", "smem")
    samples = _random_samples(6, 9, 39)
    for s in samples:
        s.tiles = {k: ((t // 37) * stride + first_id, m, e) for k, (t, m, e) in s.tiles.items()}
    samples[2].tiles = {k: v for k, v in samples[2].tiles.items() if k != g}
    whole = tile_controls(lambda: iter(samples))
    sizes, medians_by = [], tiles_module._medians_by
    monkeypatch.setattr(tiles_module, "_medians_by", lambda k, v: (sizes.append(len(k)), medians_by(k, v))[1])
    capped = tile_controls(lambda: iter(samples), cap)
    assert max(sizes) <= cap and sum(sizes) == 2 * sum(len(s.tiles[k][0]) for s in samples for k in s.tiles)
    for key, tc in whole.items():
        assert capped[key].mainloop_cycles.tobytes() == tc.mainloop_cycles.tobytes() and capped[key].tile.tolist() == tc.tile.tolist()
        assert capped[key].epilogue_ns.tobytes() == tc.epilogue_ns.tobytes() and capped[key].jitter_cycles == tc.jitter_cycles


def test_tile_id_counts_per_bin_over_every_sample_by_hand():
    # ids 10, 11, 13 and 10, 14 (one sample lacks the group): bins of one id from 10 → 2, 1, 0, 1, 1; ids 0 … 2^17 in
    # bins of 4 (shift 2): 0 and 3 in bin 0, 131 072 in bin 32 768
    g = ("S", "linear2", "smem")
    a = ControlSample(np.zeros(0), {}, {}, {g: (np.array([10, 11, 13]), np.zeros(3), np.zeros(3))})
    b = ControlSample(np.zeros(0), {}, {}, {})
    c = ControlSample(np.zeros(0), {}, {}, {g: (np.array([10, 14]), np.zeros(2), np.zeros(2))})
    assert _id_counts(lambda: iter([a, b, c]), g, 10, 14).tolist() == [2, 1, 0, 1, 1]
    d = ControlSample(np.zeros(0), {}, {}, {g: (np.array([0, 3, 1 << 17]), np.zeros(3), np.zeros(3))})
    counts = _id_counts(lambda: iter([d]), g, 0, 1 << 17)
    assert _id_shift(0, 1 << 17) == 2 and len(counts) == (1 << 15) + 1 and counts[0] == 2 and counts[-1] == 1 and counts.sum() == 3


def test_tile_controls_read_ranges_of_ids_of_at_most_the_cap_each():
    # bins of 10, 0, 30, 5, 60 values from id 100, one id per bin: a cap of 40 takes [100, 102] (40 values),
    # [103, 103] (5: the next bin's 60 do not fit), [104, 104] (60, one bin over the cap: held whole)
    assert _id_ranges(np.array([10, 0, 30, 5, 60]), 100, 0, 40) == [(100, 102), (103, 103), (104, 104)]
    # 40 fills the cap, then 30 + 10 = 40 fits again: [100, 100], [101, 102]
    assert _id_ranges(np.array([40, 30, 10]), 100, 0, 40) == [(100, 100), (101, 102)]
    # bins of width 4 (shift 2) from id 8: [8, 15] and [16, 19]
    assert _id_ranges(np.array([3, 3, 3]), 8, 2, 6) == [(8, 15), (16, 19)]
    # at most 2^16 bins: ids 2^20 apart in bins of 32 ids, 65 536 ids one bin each, one more id in bins of 2
    assert _id_shift(5, 5 + (1 << 20)) == 5 and _id_shift(0, 65535) == 0 and _id_shift(0, 65536) == 1
    assert _id_shift(70_000, 70_038) == 0  # the span counts, not where it lies


# ---------------------------------------------------------------- lookups of the control per tile

def test_combined_keys_give_one_code_per_key_tuple_and_back():
    # column 1 names (x, y), column 2 names (p): codes (0, 0), (1, −1), (−1, 0), (1, 0) → four distinct keys
    combo, key_of = _combined_keys([(np.array([0, 1, -1, 1]), ["x", "y"]), (np.array([0, -1, 0, 0]), ["p"])])
    assert len(set(combo.tolist())) == 4
    assert [key_of(g) for g in combo] == [("x", "p"), ("y", None), (None, "p"), ("y", "p")]


def _groups(t: pd.DataFrame):
    """The tiles' CONTROL_KEYS groups, as finish_tiles makes them for both lookups."""
    return _combined_keys([text_codes(t[k]) for k in CONTROL_KEYS])


def test_control_lookup_matches_missing_keys_to_missing_keys_and_unknown_keys_to_nan():
    p99 = pd.DataFrame({"shape": ["S", np.nan], "tile_kind": ["k", "k"], "operands": ["o", "o"], "ctrl": [1.0, 2.0],
                        "ctrl_median": [3.0, 4.0]})
    t = pd.DataFrame({"shape": [None, "S", "T", "S"], "tile_kind": ["k", "k", "k", "j"], "operands": ["o"] * 4})
    got = _control_lookup(_groups(t), p99)
    assert set(got) == {"ctrl", "ctrl_median"}
    _close(got["ctrl"], [2, 1, NAN, NAN])
    _close(got["ctrl_median"], [4, 3, NAN, NAN])
    got = _control_lookup(_groups(t), p99.iloc[:0])
    _close(got["ctrl"], [NAN] * 4)


def test_tile_control_lookup_finds_the_tile_id_in_its_group_only():
    # group (S, k, o) has tiles 2 and 5; tile 5 → its entry, tile 3 and tile 9 (past the last id) → NaN;
    # a tile of a group without a per-tile control → NaN
    tc = TileControl(np.array([2, 5]), np.array([20.0, 50.0]), np.array([1.0, 4.0]), 7.0)
    # (the group without comes first)
    t = pd.DataFrame({"shape": ["T", "S", "S", "S", "S"], "tile_kind": ["k"] * 5, "operands": ["o"] * 5, "tile": [2, 5, 3, 9, 2]})
    ml, ep, jitter = _tile_control_lookup(_groups(t), t, {("S", "k", "o"): tc})
    _close(ml, [NAN, 50, NAN, NAN, 20])
    _close(ep, [NAN, 4, NAN, NAN, 1])
    _close(jitter, [NAN, 7, NAN, NAN, 7])
    assert ml.dtype == ep.dtype == jitter.dtype == np.float64
    ml, ep, jitter = _tile_control_lookup(_groups(t), t, {})
    _close(ml, [NAN] * 5)


# ---------------------------------------------------------------- inflation and the stall's parts (Eq. 46, 47)

def test_a_mainloop_is_inflated_beyond_the_noise_and_five_percent_not_at_them():
    # control p99 1000, noise 100: threshold max(100, 50) = 100 → 1100 not inflated, 1100.5 inflated;
    # control p99 4000, noise 100: max(100, 200) = 200 → 4150 not, 4201 inflated; no control (NaN) → False
    t = pd.DataFrame({"control_mainloop_ns": [1000.0, 1000.0, 4000.0, 4000.0, NAN], "mainloop_ns": [1100.0, 1100.5, 4150.0, 4201.0, 9e9],
                      "noise_ns": 100.0})
    assert mainloop_inflated(t).tolist() == [False, True, False, True, False]


def test_compute_and_total_stall_by_hand():
    # c_meas: 1300 − 1000 inflated → 300; not inflated → 0; no control → NaN
    _close(compute_stall_ns(np.array([1300.0, 1300.0, 1300.0]), np.array([1000.0, 1000.0, NAN]), np.array([True, False, True])),
           [300, 0, NAN])
    # Δt_meas = w + c, a missing part counts 0, NaN only where both are missing
    got = total_stall_ns(np.array([100.0, NAN, 100.0, NAN]), np.array([5.0, 5.0, NAN, NAN]))
    _close(got, [105, 5, 100, NAN])
    assert got.dtype == np.float64


def test_a_measured_wait_equal_to_the_noise_is_no_slot_backpressure():
    # floor 300; waits 800 and 801 → w_meas 500, 501 against a noise of 500 given: only 501 exceeds it (§12 "exceeds")
    dumps = _dumps([(0, "c", "local", "S", "smem", True), (0, "h", "host", "S", "smem", False)])
    run = pd.concat([_tiles("c", [0], [1000], [300.0]), _tiles("h", [0, 1, 2], [1000] * 3, [800.0, 801.0, NAN])], ignore_index=True)
    t = finish_tiles(run, dumps, noise_ns=500.0)
    assert t["diagnosis"].tolist() == ["none", "none", "slot_backpressure", "none"]
    assert t["backpressured"].tolist() == [False, False, True, False]


def test_an_unmeasured_wait_is_no_backpressure_whatever_the_noise():
    # no control: every w_meas is NaN, which is not a stall even under a noise below 1 ns; nothing is predicted (0)
    dumps = _dumps([(0, "h", "host", "S", "smem", False)])
    t = finish_tiles(_tiles("h", [0], [1000], [900.0]), dumps, noise_ns=0.5)
    assert t["backpressured"].tolist() == [False] and t["diagnosis"].tolist() == ["none"]


def test_without_a_per_tile_control_no_tile_column_is_read():
    t = pd.DataFrame({"shape": ["S", "S"], "tile_kind": ["k", "k"], "operands": ["o", "o"]})   # no tile column
    ml, ep, jitter = _tile_control_lookup(_groups(t), t, {})
    _close(ml, [NAN, NAN])
    _close(jitter, [NAN, NAN])


def test_dump_config_by_rank_and_dump_with_rank_zero_a_missing_dump_name_and_the_tiles_index():
    # ranks 0 and 5; (0, "a") — the first dump row — is the control; a tile without a dump name has no configuration
    # (not that of another dump); each tile has one dump row, so the tiles keep their index
    dumps = pd.DataFrame([{"rank": r, "dump": d, "dest": dest, "shape": f"s{r}{d}", "schedule": "wave", "variant": "v",
                           "operands": "smem", "is_control": ctrl} for r, d, dest, ctrl in
                          [(0, "a", "local", True), (5, "a", "host", False), (0, "b", "peer", False)]])
    spans = _spans_of([(5, "a", True), (0, "a", False), (0, "b", True), (0, None, True)])
    spans.index = [10, 11, 12, 13]
    t = with_dump_config(spans, dumps)
    assert t["shape"].tolist()[:3] == ["s5a", "s0a", "s0b"] and pd.isna(t["shape"].iloc[3])
    assert t["is_control"].tolist() == [False, True, False, False]
    assert t.index.tolist() == [10, 11, 12, 13]
    t = with_dump_config(_spans_of([(0, "a", True)]), dumps.iloc[:0])
    assert t["is_control"].dtype == bool


def test_control_sample_of_a_mapping_of_columns_with_an_object_control_flag():
    # the docstring's "mapping of columns": an object column of Python booleans (pandas' merge gives such)
    f = _control_frame()
    cols = {c: f[c] for c in f.columns}
    cols["is_control"] = pd.Series([True, True, False, True, True], dtype=object)
    s = control_sample(cols)
    _close(s.waits_ns, [10, 20, 40])


def test_control_statistics_of_no_sample_and_the_defaults_of_a_control_statistics():
    c = control_stats_from_samples(lambda: (), 5)
    assert (c.floor_ns, c.noise_ns, c.waits, c.per_tile) == (0.0, 200.0, 0, {}) and c.mainloop_p99.empty
    c = ControlStats(0.0, 200.0, pd.DataFrame())
    assert c.waits == 0 and c.per_tile == {}


def test_cycles_of_clocks_beyond_2_to_the_53_are_counted_exactly():
    # clock64 after 2^53 cycles (52 days at 2 GHz): begin 2^53 + 1, end 2^53 + 400 → 399 cycles for 798 ns → 2 ns per
    # cycle (as float64 values the begin rounds to 2^53 and the span reads 400 cycles, 1.995 ns per cycle)
    big = 2 ** 53
    s = tile_spans(_probes(_span(0, "d", 0, 0, "mainloop", 0, 798, c0=big + 1, c1=big + 400)), FUSED)
    assert s["ns_per_cycle"].tolist() == [2.0]


def test_integer_spans_give_the_schemas_float_columns():
    # spans given as integers (a lead, a slot wait, a prediction, a clock period of 1): base.schema.TILES's float64
    # columns; a missing lead and an unmeasured stall are NaN floats, not None
    dumps = _dumps([(0, "c", "local", "S", "smem", True), (0, "h", "host", "S", "smem", False)])
    run = pd.concat([_tiles("c", [0], [1000], [300.0]), _tiles("h", [0, 1], [1000, 1000], [800.0, NAN])], ignore_index=True)
    ints = run.assign(epilogue_lead_ns=[1, 2, 3], slot_wait_ns=[300, 800, 0], predicted_stall_ns=[0, 5, 0], ns_per_cycle=1)
    t = finish_tiles(ints, dumps)
    for c in ("epilogue_lead_ns", "slot_wait_ns", "predicted_stall_ns", "ns_per_cycle", "stall_ns"):
        assert t[c].dtype == np.float64, c
    t = finish_tiles(run, dumps)  # no lead column; tile 1 of h has no measured stall
    assert t["epilogue_lead_ns"].dtype == np.float64 and t["stall_ns"].dtype == np.float64
    _close(t["stall_ns"], [0, 500, NAN])


def test_dump_config_of_ranks_below_zero_integer_flags_and_no_tiles():
    # ranks −1 and 2 (lo = −1, width 4); is_control given as 0/1: the flag is a bool column
    dumps = pd.DataFrame([{"rank": r, "dump": d, "dest": "host", "shape": f"s{r}{d}", "schedule": "wave", "variant": "v",
                           "operands": "smem", "is_control": ctrl} for r, d, ctrl in [(-1, "a", 1), (2, "a", 0), (-1, "b", 0)]])
    t = with_dump_config(_spans_of([(2, "a", True), (-1, "a", True), (-1, "b", True)]), dumps)
    assert t["shape"].tolist() == ["s2a", "s-1a", "s-1b"]
    assert t["is_control"].tolist() == [False, True, False] and t["is_control"].dtype == bool
    t = with_dump_config(_spans_of([]), dumps)
    assert len(t) == 0 and "dest" in t and "tile_kind" in t


def test_combined_keys_of_no_column_and_a_control_lookup_of_no_tile():
    combo, key_of = _combined_keys([])
    assert len(combo) == 0 and key_of(0) == ()
    p99 = pd.DataFrame({"shape": ["S"], "tile_kind": ["k"], "operands": ["o"], "ctrl": [1.0]})
    got = _control_lookup(_groups(pd.DataFrame({"shape": [], "tile_kind": [], "operands": []}, dtype=object)), p99)
    assert len(got["ctrl"]) == 0


def test_control_statistics_order_groups_by_key_text_and_a_sample_without_store_spans():
    # groups T then S in the samples: the table lists S before T (sorted keys, missing ones first);
    # a hand-built sample of mainloops only (no store spans recorded): store median and p99 NaN
    s = ControlSample(np.array([5.0]), {("T", "k", "o"): np.array([10.0]), ("S", "k", "o"): np.array([20.0, 40.0])}, {})
    c = control_stats_from_samples(lambda: (s,), 10)
    p = c.mainloop_p99
    assert p["shape"].tolist() == ["S", "T"]
    _close(p["ctrl_median"], [30, 10])
    _close(p["ctrl_store_median"], [NAN, NAN])
    _close(p["ctrl_store_p99"], [NAN, NAN])


def test_control_sample_of_integer_columns_gives_float_values_and_int64_tile_ids():
    # integer waits, spans and epilogues (no clock period: spans in ns) and the probes' uint32 tile ids
    f = _control_frame().drop(columns="ns_per_cycle").iloc[:4].assign(
        slot_wait_ns=[10, 20, 30, 40], mainloop_ns=[1000, 300, 99, 800], rs_ns=[5, 6, 7, 8], epilogue_span_ns=[50, 60, 70, 80],
        tile=np.array([4, 4, 4, 1], np.uint32))
    s = control_sample(f)
    key = ("S", "linear2", "smem")
    assert s.waits_ns.dtype == np.float64 and s.mainloops_cycles[key].dtype == np.float64 and s.stores_ns[key].dtype == np.float64
    tile, ml, ep = s.tiles[key]
    assert tile.dtype == np.int64 and ml.dtype == np.float64 and ep.dtype == np.float64
    _close(ml, [1000, 800])
    s = control_sample(_control_frame().drop(columns="epilogue_span_ns"))
    assert s.tiles[key][2].dtype == np.float64


def test_zero_cycles_are_no_division_by_zero():
    # a tile that records no cycles is left out before dividing (no RuntimeWarning)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _close(launch_ns_per_cycle(np.array([0, 0]), np.array([100.0, 50.0]), np.array([0.0, 25.0])), [2, 2])


def test_ranks_running_one_dump_name_and_cta_do_not_cover_each_other():
    # rank 0 and rank 1 both ran dump "a" on CTA 0 (tiles of 100 and 300 ns each): each rank's last tile has no cover
    r = []
    for rank in (0, 1):
        r += _span(rank, "a", 0, 1, "mainloop", 0, 100) + _span(rank, "a", 0, 2, "mainloop", 200, 500)
    s = tile_spans(_probes(r), FUSED)
    assert s["rank"].tolist() == [0, 0, 1, 1] and s["position"].tolist() == [0, 1, 0, 1]
    _close(s["cover_ns"], [300, NAN, 300, NAN])


def test_tile_spans_read_no_span_of_an_event_or_a_kind_the_records_lack():
    # Text columns (not categoricals), coded in order of appearance: events mainloop 0, tile_info 1, rs 2; kinds
    # begin 0, end 1, mark 2. The lifecycle's slot wait and local store are not recorded: no wait, no local-store span
    # (NaN), never the spans of an event that happens to hold another code (rs). Tile 1 of CTA 0: mainloop 0 → 500,
    # rs 600 → 900.
    r = _span(0, "d", 0, 1, "mainloop", 0, 500, c0=0, c1=250) + _mark(0, "d", 0, 1, "tile_info", 0) + _span(0, "d", 0, 1, "rs", 600, 900, 64)
    t = tile_spans(_probes(r), FUSED)
    assert len(t) == 1 and t["mainloop_ns"].tolist() == [500.0] and t["rs_ns"].tolist() == [300.0]
    assert np.isnan(t["wait_ns"]).all() and np.isnan(t["ls_ns"]).all()
    # no end record of any kind: a mainloop closed by a record of another kind ("point", code 2) is no span
    r = [(0, "d", 0, 1, "mainloop", "begin", 0, 0.0, 0), (0, "d", 0, 1, "tile_info", "mark", 0, 0.0, 0),
         (0, "d", 0, 1, "mainloop", "point", 0, 500.0, 250)]
    assert tile_spans(_probes(r), FUSED).empty
