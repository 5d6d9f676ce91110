"""The FlashAttention Q-loop piggyback audit (analysis/piggyback.py, docs/model.md §7) on probe tables built in the
test (no dump file, no analysis run): two CTAs of a causal FA3 launch over local HBM with sampled K/V steps and the
same tiles over a host path, every expected value worked out by hand in the comments (docs/mutation.md: written
against the mutants the FA3 sample tests let through)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.piggyback import decode_tile_id, kv_blocks, kv_step_spans, piggyback_audit, qloop_tiles
from xstage_trace.analysis.platform import PlatformModel

LABEL = "kernel=fa3 seqlen=520 causal=1 block_m=128 block_n=128 head_dim=64 out_bytes=2 trial=0"


def tile_id(m_block: int, head: int, batch: int) -> int:
    return batch << 24 | head << 12 | m_block


A, B, C, D = tile_id(0, 0, 0), tile_id(2, 0, 0), tile_id(4, 1, 3), tile_id(1, 1, 3)


def _span_rows(dump, cta, tile, event, start, end, payload=0, begin_payload=None):
    return [(0, dump, cta, tile, event, "begin", payload if begin_payload is None else begin_payload, float(start)),
            (0, dump, cta, tile, event, "end", payload, float(end))]


def _probes() -> pd.DataFrame:
    """ns. 'c.xsp' (local): CTA 0: A mainloop 0–1000 (epilogue to 1100), B 1200–4800 (to 4900); CTA 1: C 100–6100
    (to 6200), D 6300–7900 (to 8000). Its first mainloop begin carries S = 2 (the others 0); K/V steps on A (block
    0: 100–900) and C (blocks 2, 1, 0: 100–1100, 1100–3100, 3100–4600). 'h.xsp' (host): A 0–1000, B 1200–9200,
    C 100–6100, D 6300–11300, epilogues 100, 100, 50, 50. 'x.xsp' (no geometry) and an unrelated event are ignored."""
    r = []
    for dump, cta, tile, ml_b, ml_e, ep in [("c.xsp", 0, B, 1200, 4800, 100), ("c.xsp", 1, C, 100, 6100, 100),
                                           ("c.xsp", 0, A, 0, 1000, 100), ("c.xsp", 1, D, 6300, 7900, 100),
                                           ("h.xsp", 0, A, 0, 1000, 100), ("h.xsp", 0, B, 1200, 9200, 100),
                                           ("h.xsp", 1, C, 100, 6100, 50), ("h.xsp", 1, D, 6300, 11300, 50),
                                           ("x.xsp", 0, A, 0, 50, 5)]:
        r += _span_rows(dump, cta, tile, "mainloop", ml_b, ml_e, begin_payload=2 if (dump, tile) == ("c.xsp", A) else 0)
        r += _span_rows(dump, cta, tile, "epilogue", ml_e, ml_e + ep)
    r += _span_rows("c.xsp", 0, A, "kv_step", 100, 900, payload=0)
    for block, (s, e) in zip((2, 1, 0), ((100, 1100), (1100, 3100), (3100, 4600))):
        r += _span_rows("c.xsp", 1, C, "kv_step", s, e, payload=block)
    r += _span_rows("c.xsp", 0, A, "other", 0, 99999)
    return pd.DataFrame(r, columns=["rank", "dump", "cta", "tile", "event", "kind", "payload", "t_ns"])


def _dumps() -> pd.DataFrame:
    return pd.DataFrame({"rank": 0, "dump": ["c.xsp", "h.xsp", "x.xsp", "y.xsp"], "dest": ["local", "host", "host", "host"],
                         "shape": "s520c", "extra": [LABEL, LABEL, "seqlen=520", LABEL.replace("block_m=128", "block_m=x")]})


@pytest.fixture
def tiles():
    return qloop_tiles(_probes(), _dumps())


def test_kv_blocks_causal_and_not_by_hand():
    # causal 128 × 128 at 520 tokens: m block m ends at min(520, 128(m + 1)): ⌈128/128⌉ = 1, ⌈384/128⌉ = 3, ⌈520/128⌉ = 5
    assert kv_blocks([0, 2, 4], 520, 128, 128, True).tolist() == [1, 3, 5]
    # b_m 100, b_n 64: rows 100 → 2 blocks, 200 → 4, 520 (min) → 9; non-causal: every tile ⌈520/64⌉ = 9
    assert kv_blocks([0, 1, 9], 520, 100, 64, True).tolist() == [2, 4, 9]
    assert kv_blocks([0, 1], 520, 100, 64, False).tolist() == [9, 9]


def test_decode_tile_id_splits_the_three_fields():
    m, h, b = decode_tile_id([tile_id(5, 4095, 1), tile_id(4095, 1, 255)])
    assert m.tolist() == [5, 4095] and h.tolist() == [4095, 1] and b.tolist() == [1, 255]


def test_qloop_tiles_order_spans_gaps_and_blocks_by_hand(tiles):
    assert sorted(tiles["dump"].unique()) == ["c.xsp", "h.xsp"]  # x.xsp lacks the geometry, y.xsp's is not integer
    c = tiles[tiles["dump"] == "c.xsp"].set_index("tile")
    # in each CTA's start order: A, B (CTA 0), C, D (CTA 1), whatever the rows' order
    assert c.loc[[A, B, C, D], "position"].tolist() == [0, 1, 0, 1]
    assert c.loc[[A, B, C, D], "mainloop_ns"].tolist() == [1000, 3600, 6000, 1600]
    assert c.loc[[A, B, C, D], "epilogue_ns"].tolist() == [100, 100, 100, 100]
    assert c.loc[[A, B, C, D], "m_block"].tolist() == [0, 2, 4, 1] and c.loc[[A, C], "head"].tolist() == [0, 1]
    assert c.loc[[A, C], "batch"].tolist() == [0, 3]
    # causal blocks 1, 3, 5, 2: σ = 1000, 1200, 1200, 800
    assert c.loc[[A, B, C, D], "kv_blocks"].tolist() == [1, 3, 5, 2]
    assert c.loc[[A, B, C, D], "sigma_ns"].tolist() == [1000, 1200, 1200, 800]
    # the gap after a tile is the next tile's Q-loop on its CTA: A → 3600, C → 1600; none after the last
    np.testing.assert_array_equal(c.loc[[A, B, C, D], "gap_after_ns"], [3600, np.nan, 1600, np.nan])
    assert list(tiles.columns[:6]) == ["rank", "dump", "dest", "shape", "cta", "position"]
    assert (c["dest"] == "local").all() and (c["seqlen"] == 520).all() and (c["head_dim"] == 64).all() and (c["causal"] == 1).all()


def test_qloop_tiles_kv_steps_and_sampling_by_hand(tiles):
    c = tiles[tiles["dump"] == "c.xsp"].set_index("tile")
    # S = 2 (the largest mainloop begin payload of the dump): positions 0 are sampled
    assert (c["kv_every"] == 2).all() and c.loc[[A, B, C, D], "kv_sampled"].tolist() == [True, False, True, False]
    # A: one step of 800, exit 900: tail 1000 − 900 = 100; C: steps 1000, 2000, 1500 (median 1500, max 2000),
    # exit 4600: tail 6100 − 4600 = 1500; B, D: none
    assert c.loc[[A, B, C, D], "kv_steps"].tolist() == [1, 0, 3, 0]
    np.testing.assert_array_equal(c.loc[[A, B, C, D], "kv_step_median_ns"], [800, np.nan, 1500, np.nan])
    np.testing.assert_array_equal(c.loc[[A, B, C, D], "kv_step_max_ns"], [800, np.nan, 2000, np.nan])
    np.testing.assert_array_equal(c.loc[[A, B, C, D], "qloop_tail_ns"], [100, np.nan, 1500, np.nan])
    h = tiles[tiles["dump"] == "h.xsp"]
    assert (h["kv_every"] == 0).all() and not h["kv_sampled"].any() and (h["kv_steps"] == 0).all()


def test_kv_step_spans_by_hand():
    s = kv_step_spans(_probes()).sort_values(["cta", "start_ns"])
    assert list(s.columns) == ["rank", "dump", "cta", "tile", "kv_block", "start_ns", "end_ns", "step_ns"]
    assert s["kv_block"].tolist() == [0, 2, 1, 0] and s["step_ns"].tolist() == [800, 1000, 2000, 1500]
    assert s["end_ns"].tolist() == [900, 1100, 3100, 4600]


def test_no_probes_or_no_geometry_or_no_spans_give_no_tiles():
    p, d = _probes(), _dumps()
    assert qloop_tiles(p.iloc[:0], d).empty and qloop_tiles(p, d.iloc[2:3]).empty
    assert qloop_tiles(p[p["event"] != "epilogue"], d).empty and qloop_tiles(p[p["event"] != "mainloop"], d).empty


# K = 2 CTAs, B_t = 128·64·2 = 16384 B, V = 32768 B.
# host: R = 8.192 B/ns → V/R = 4000 ns, T_iss^0 = 1000: G* = 3000, b^iso = 32768 − 8192 = 24576 > Q = 20000.
# peer: R = 16.384 → V/R = 2000, T_iss^0 = 400: G* = 1600, b^iso = 32768 − 6553.6 = 26214.4, no Q.
HOST = PlatformModel(rate_gbps=8.192, issue_floor_ns={(2, 16384): 1000.0}, capacity_by_producers={2: 20000.0}, store_path="host")
PEER = PlatformModel(rate_gbps=16.384, issue_floor_ns={(2, 16384): 400.0}, store_path="peer")


def test_audit_per_path_by_hand(tiles):
    _, s = piggyback_audit(tiles, {"peer": PEER, "host": HOST, "local": PEER})
    assert s["path"].tolist() == ["host", "local", "peer"]
    s = s.set_index("path")
    h, p = s.loc["host"], s.loc["peer"]
    assert (h["rank"], h["shape"], h["seqlen"], h["causal"], h["producers"], h["bytes_per_producer"]) == (0, "s520c", 520, 1, 2, 16384)
    assert h["volume_bytes"] == 32768 and h["rate_gbps"] == 8.192 and h["issue_floor_ns"] == 1000.0
    assert h["drain_time_ns"] == pytest.approx(4000.0) and h["recovery_gap_ns"] == pytest.approx(3000.0)
    assert h["isolated_excess_bytes"] == pytest.approx(24576.0) and h["capacity_bytes"] == 20000.0 and not h["capacity_ok"]
    # σ = median(1000, 1200, 1200, 800) = 1100 (the mean would be 1050): M_ub* = 128·⌈3000/1100⌉ = 384
    assert h["sigma_ns"] == 1100.0 and h["m_ub_tokens"] == 384
    # at 520 tokens the gap is at least 1100·⌈520/128⌉ = 5500 ≥ G*, but b^iso > Q: reshape
    assert h["qloop_gap_lb_ns"] == pytest.approx(5500.0) and h["verdict"] == "reshape"
    # control gaps 3600, 1600: median 2600; 3600 covers G* = 3000, 1600 does not
    assert h["gap_median_ns"] == 2600.0 and h["covered_fraction"] == 0.5
    # peer: no capacity (not judged), G* = 1600 is covered by both gaps (1600 exactly); M_ub* = 128·⌈1600/1100⌉ = 256
    assert p["recovery_gap_ns"] == pytest.approx(1600.0) and p["covered_fraction"] == 1.0 and p["m_ub_tokens"] == 256
    assert p["capacity_ok"] is None and np.isnan(p["capacity_bytes"]) and p["verdict"] == "piggyback"
    assert p["isolated_excess_bytes"] == pytest.approx(26214.4)
    # the control's own dest and a path with no traced run have no measurement
    assert s[["measured_dump", "tiles_joined"]].loc[["local", "peer"]].isna().all().all()


def test_audit_prediction_against_the_host_run_by_hand(tiles):
    per_tile, s = piggyback_audit(tiles, {"host": HOST})
    h = s.iloc[0]
    # drain-limited rest V/R − T_iss^0 = 3000; after a burst max(G, 3000) with G the control's Q-loop of the same tile:
    # A (first) 1000, B max(3600, 3000) = 3600, C (first) 6000, D max(1600, 3000) = 3000; measured 1000, 8000, 6000, 5000
    p = per_tile.set_index("tile")
    np.testing.assert_allclose(p.loc[[A, B, C, D], "predicted_qloop_ns"], [1000, 3600, 6000, 3000])
    assert p.loc[[A, B, C, D], "measured_qloop_ns"].tolist() == [1000, 8000, 6000, 5000]
    assert p.loc[[A, B, C, D], "control_qloop_ns"].tolist() == [1000, 3600, 6000, 1600] and (p["path"] == "host").all()
    assert (p["dest"] == "host").all() and len(p) == 4
    assert h["measured_dump"] == "h.xsp" and h["tiles_joined"] == 4
    # medians: control 2600, predicted 3300, measured 5500; error 5500 / 3300 − 1; MAE (0 + 4400 + 0 + 2000) / 4 = 1600
    assert h["control_qloop_median_ns"] == 2600.0 and h["predicted_qloop_median_ns"] == pytest.approx(3300.0)
    assert h["measured_qloop_median_ns"] == 5500.0 and h["qloop_median_error"] == pytest.approx(5500 / 3300 - 1)
    assert h["qloop_mae_ns"] == pytest.approx(1600.0)
    # epilogues: host 100, 100, 50, 50 (median 75), control 100; implied rate V / (5500 + 75)
    assert h["epilogue_median_ns"] == 75.0 and h["control_epilogue_median_ns"] == 100.0
    assert h["implied_rate_gbps"] == pytest.approx(32768 / 5575)


def test_audit_with_another_control_dest_and_ranks_in_order():
    # the host run as the control: the audit reads its tiles (σ from its Q-loops), the local path is measured against it
    t = qloop_tiles(_probes(), _dumps())
    _, s = piggyback_audit(t, {"local": HOST}, control_dest="host")
    r = s.iloc[0]
    # host Q-loops / blocks: 1000, 8000/3, 1200, 2500: median (1200 + 2500) / 2 = 1850; its gaps 8000, 5000
    assert r["sigma_ns"] == pytest.approx(1850.0) and r["gap_median_ns"] == 6500.0 and r["measured_dump"] == "c.xsp"
    # rank 1 holds the tiles above, rank 0 one tile per CTA without a gap after it: rows sorted by rank
    t2 = pd.concat([t.assign(rank=1), t[t["position"] == 0].assign(gap_after_ns=np.nan)], ignore_index=True)
    _, s2 = piggyback_audit(t2, {"host": HOST})
    assert s2["rank"].tolist() == [0, 1]
    assert np.isnan(s2["gap_median_ns"].iloc[0]) and np.isnan(s2["covered_fraction"].iloc[0])
    assert s2["gap_median_ns"].iloc[1] == 2600.0


def test_audit_of_nothing_is_empty(tiles):
    for per_tile, s in (piggyback_audit(tiles.iloc[:0], {"host": HOST}), piggyback_audit(tiles, {})):
        assert per_tile.empty and s.empty
    per_tile, s = piggyback_audit(tiles[tiles["dest"] == "local"], {"host": HOST})
    assert per_tile.empty and len(s) == 1
