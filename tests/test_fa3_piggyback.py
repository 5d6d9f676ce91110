"""FA3 traced tiles (recipe fa3) and the docs/model.md §7 piggyback audit: hand-built dumps with known spans,
hand-computed K/V block counts, the paper's §7 numbers, and the piggyback command as a user runs it."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.piggyback import decode_tile_id, kv_blocks, piggyback_audit, qloop_tiles
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.base.probe_layout import RECORD_DTYPE, SLICE_DTYPE
from xstage_trace.instrument.probe_writer import write_probe_dump

EXE = [sys.executable, "-m", "xstage_trace"]
EVENTS = ["mainloop", "epilogue"]
GT0 = 1_000_000_000  # %globaltimer at open; clock64 runs at 1 cycle per ns in these dumps


def tile_id(m_block: int, head: int, batch: int) -> int:
    """The recipe's packing (instrument/targets/fa3/files/hopper/xstage_fa3.h): batch 24..31, head 12..23, m 0..11."""
    return batch << 24 | head << 12 | m_block


def write_fa3_dump(path, ctas: list[list[tuple[int, int, int, int]]], label: str, kv_every: int = 0) -> None:
    """One slice per CTA; per tile (tile id, mainloop start ns, mainloop ns, epilogue ns), the epilogue right
    after the mainloop, the mainloop begin's payload ``kv_every`` (the recipe's K/V-step sampling period). Times are
    cycles since the slice opened (1 cycle = 1 ns)."""
    cap = 4 * max(len(t) for t in ctas)
    slices = np.zeros(len(ctas), SLICE_DTYPE)
    records = np.zeros(len(ctas) * cap, RECORD_DTYPE)
    for c, tiles in enumerate(ctas):
        recs = []
        for tile, start, ml, ep in tiles:
            for ev, kind, t in ((0, 1, start), (0, 2, start + ml), (1, 1, start + ml), (1, 2, start + ml + ep)):
                recs.append((t | ev << 48 | kind << 56, tile, kv_every if (ev, kind) == (0, 1) else 0))
        end = max(s + m + e for _, s, m, e in tiles) + 1000
        slices[c] = (len(recs), 1, c, c, GT0, 0, GT0 + end, end)
        records[c * cap: c * cap + len(recs)] = np.array(recs, RECORD_DTYPE)
    write_probe_dump(path, slice_meta=slices, records=records, capacity=cap, event_names=EVENTS, gpu_name="NVIDIA H200",
                     sm_count=132, sm_clock_khz=1_000_000, label=label)


def label(dest: str, seqlen: int = 520, causal: int = 0, bm: int = 128, bn: int = 176) -> str:
    return (f"kernel=fa3 dest={dest} shape=s{seqlen}{'c' if causal else 'n'} ctas=2 seqlen={seqlen} causal={causal} "
            f"block_m={bm} block_n={bn} head_dim=128 out_bytes=2 trial=0")


# two CTAs, static order: CTA 0 takes m blocks 0, 2, 4 of (head 0, batch 0), CTA 1 takes 1, 3 of head 1, batch 1
CONTROL = [[(tile_id(0, 0, 0), 0, 3000, 400), (tile_id(2, 0, 0), 3500, 3200, 400), (tile_id(4, 0, 0), 7200, 2800, 400)],
           [(tile_id(1, 1, 1), 0, 3100, 500), (tile_id(3, 1, 1), 3700, 2900, 500)]]
# the same tiles over a slow path: every Q-loop after a burst stretched
HOST = [[(tile_id(0, 0, 0), 0, 3000, 300), (tile_id(2, 0, 0), 3400, 9000, 300), (tile_id(4, 0, 0), 12800, 9500, 300)],
        [(tile_id(1, 1, 1), 0, 3100, 350), (tile_id(3, 1, 1), 3500, 8800, 350)]]


@pytest.fixture(scope="module")
def fa3_run(tmp_path_factory):
    from xstage_trace.pipeline.runner import analyze_inputs

    d = tmp_path_factory.mktemp("fa3")
    dumps = d / "dumps"
    dumps.mkdir()
    write_fa3_dump(dumps / "fa3_local_s520_noncausal.xsp", CONTROL, label("local"))
    write_fa3_dump(dumps / "fa3_host_s520_noncausal.xsp", HOST, label("host"))
    analyze_inputs([dumps], d / "run")
    return d / "run"


def test_kv_blocks_match_hand_counts():
    # non-causal: every Q tile visits ⌈520/176⌉ = 3 blocks
    assert kv_blocks(np.array([0, 4]), 520, 128, 176, False).tolist() == [3, 3]
    # causal, 128 x 128: m block m ends at row min(520, 128(m+1)): blocks 1, 2, 3, 4, then ⌈520/128⌉ = 5
    assert kv_blocks(np.arange(5), 520, 128, 128, True).tolist() == [1, 2, 3, 4, 5]


def test_decode_tile_id_inverts_the_recipe_packing():
    m, h, b = decode_tile_id([tile_id(7, 15, 3), tile_id(4095, 4095, 255)])
    assert m.tolist() == [7, 4095] and h.tolist() == [15, 4095] and b.tolist() == [3, 255]


def test_qloop_tiles_spans_order_and_gaps(fa3_run):
    from xstage_trace import open_run

    run = open_run(fa3_run)
    t = qloop_tiles(run.probes(), run.dumps())
    c = t[t["dest"] == "local"].sort_values(["cta", "position"])
    assert len(t) == 10 and len(c) == 5
    assert c["mainloop_ns"].tolist() == [3000, 3200, 2800, 3100, 2900]
    assert c["epilogue_ns"].tolist() == [400, 400, 400, 500, 500]
    assert c["m_block"].tolist() == [0, 2, 4, 1, 3] and c["head"].tolist() == [0, 0, 0, 1, 1] and c["batch"].tolist() == [0, 0, 0, 1, 1]
    assert c["position"].tolist() == [0, 1, 2, 0, 1]
    # the gap after a tile's O burst is the next tile's Q-loop on the same CTA; none after a CTA's last tile
    assert c["gap_after_ns"].tolist()[:2] == [3200, 2800] and math.isnan(c["gap_after_ns"].iloc[2])
    assert c["gap_after_ns"].iloc[3] == 2900 and math.isnan(c["gap_after_ns"].iloc[4])
    assert (c["kv_blocks"] == 3).all()
    assert np.allclose(c["sigma_ns"], c["mainloop_ns"] / 3)


def test_qloop_tiles_kv_step_columns_by_hand(tmp_path):
    """A tile whose dump holds the recipe's K/V steps (``kv_step`` begin/end, payload = K/V block, descending n, each
    beginning where its predecessor ended) gets their count, median, longest and the Q-loop after the last one; a
    tile without them 0 steps and NaN (the control run of ``fa3_run``, written without them, is checked too)."""
    from xstage_trace import open_run
    from xstage_trace.analysis.piggyback import kv_step_spans
    from xstage_trace.pipeline.runner import analyze_inputs

    tile = tile_id(0, 0, 0)
    # mainloop 0..10000, K/V steps of blocks 2, 1, 0: 0..3000, 3000..6500, 6500..9000, epilogue 10000..10400
    recs = [(0, 0, 1, 0), (0, 2, 1, 2), (3000, 2, 2, 2), (3000, 2, 1, 1), (6500, 2, 2, 1), (6500, 2, 1, 0), (9000, 2, 2, 0),
            (10000, 0, 2, 0), (10000, 1, 1, 0), (10400, 1, 2, 0)]
    records = np.array([(t | ev << 48 | kind << 56, tile, pay) for t, ev, kind, pay in recs], RECORD_DTYPE)
    slices = np.zeros(1, SLICE_DTYPE)
    slices[0] = (len(records), 1, 0, 0, GT0, 0, GT0 + 11000, 11000)
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    write_probe_dump(dumps / "fa3_local_s520_noncausal.xsp", slice_meta=slices, records=records, capacity=len(records),
                     event_names=[*EVENTS, "kv_step"], gpu_name="NVIDIA H200", sm_count=132, sm_clock_khz=1_000_000,
                     label=label("local"))
    analyze_inputs([dumps], tmp_path / "run")
    run = open_run(tmp_path / "run")
    steps = kv_step_spans(run.probes()).sort_values("start_ns")
    assert steps["kv_block"].tolist() == [2, 1, 0] and steps["step_ns"].tolist() == [3000, 3500, 2500]
    t = qloop_tiles(run.probes(), run.dumps()).iloc[0]
    assert t["kv_steps"] == 3 and t["kv_step_median_ns"] == 3000 and t["kv_step_max_ns"] == 3500
    assert t["qloop_tail_ns"] == 1000 and t["mainloop_ns"] == 10000


def test_tiles_without_kv_steps_have_none(fa3_run):
    from xstage_trace import open_run

    run = open_run(fa3_run)
    t = qloop_tiles(run.probes(), run.dumps())
    assert (t["kv_steps"] == 0).all() and t[["kv_step_median_ns", "kv_step_max_ns", "qloop_tail_ns"]].isna().all().all()
    assert (t["kv_every"] == 0).all() and not t["kv_sampled"].any()


def test_kv_sampled_tiles_are_every_kth_of_each_cta(tmp_path):
    """With the recipe's tile sampling (the mainloop begin payload S = 2), a CTA's tiles 0, 2, 4, ... in its order are
    the sampled ones: CTA 0's first and third tile, CTA 1's first (CONTROL's two CTAs, by hand)."""
    from xstage_trace import open_run
    from xstage_trace.pipeline.runner import analyze_inputs

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    write_fa3_dump(dumps / "fa3_local_s520_noncausal.xsp", CONTROL, label("local"), kv_every=2)
    analyze_inputs([dumps], tmp_path / "run")
    run = open_run(tmp_path / "run")
    t = qloop_tiles(run.probes(), run.dumps()).set_index("tile")
    assert (t["kv_every"] == 2).all()
    sampled = {tile_id(0, 0, 0), tile_id(4, 0, 0), tile_id(1, 1, 1)}
    assert t["kv_sampled"].to_dict() == {k: k in sampled for k in t.index}


def test_dumps_without_fa3_geometry_are_left_out():
    probes = pd.DataFrame({"rank": [0], "dump": ["x.xsp"], "cta": [0], "tile": [0], "event": ["mainloop"], "kind": ["begin"],
                           "payload": [0], "t_ns": [0.0]})
    dumps = pd.DataFrame({"rank": [0], "dump": ["x.xsp"], "dest": ["host"], "shape": ["s"], "extra": ["seqlen=520"]})
    assert qloop_tiles(probes, dumps).empty


def _control_tiles(producers: int, sigma_ns: float, kv: int, seqlen: int, bm: int = 128, bn: int = 128) -> pd.DataFrame:
    """One tile per CTA, then a second whose Q-loop is the gap: every tile visits ``kv`` blocks at σ each."""
    n = 2 * producers
    return pd.DataFrame({
        "rank": 0, "dump": "c.xsp", "dest": "local", "shape": "s", "cta": np.repeat(np.arange(producers), 2),
        "position": np.tile([0, 1], producers), "tile": np.arange(n), "kv_blocks": kv, "mainloop_ns": sigma_ns * kv,
        "epilogue_ns": 500.0, "sigma_ns": sigma_ns, "gap_after_ns": np.tile([sigma_ns * kv, np.nan], producers),
        "seqlen": seqlen, "causal": 0, "block_m": bm, "block_n": bn, "head_dim": 128, "out_bytes": 2,
    })


def test_audit_reproduces_the_papers_fa4_numbers():
    # docs/model.md §7: b_m = 128, d = 128, bf16, K = 148: B_t = 32 KiB, V ≈ 4.6 MiB, G* ≈ 6.0 µs at R ≈ 717 GB/s and
    # T_iss^0 ≈ 0.76 µs; σ ≈ 0.79 µs per KV tile gives M_ub* ≈ 1.0 K tokens; b^iso ≈ 4.1 MiB < Q ≈ 4.25 MiB
    mib = 1 << 20
    model = PlatformModel(rate_gbps=717.0, issue_floor_ns={(148, 32768): 760.0}, capacity_by_producers={148: 4.25 * mib}, store_path="peer")
    tiles = _control_tiles(148, 790.0, 64, 8192)
    _, s = piggyback_audit(tiles, {"peer": model})
    r = s.iloc[0]
    assert r["bytes_per_producer"] == 32 * 1024
    assert r["volume_bytes"] / mib == pytest.approx(4.6, abs=0.05)
    assert r["recovery_gap_ns"] / 1e3 == pytest.approx(6.0, abs=0.05)
    assert r["isolated_excess_bytes"] / mib == pytest.approx(4.1, abs=0.05) and bool(r["capacity_ok"])
    assert r["m_ub_tokens"] == 1024
    # M = 8192: the gap lower bound σ·⌈M/b_n⌉ = 0.79 µs · 64 covers G*
    assert r["qloop_gap_lb_ns"] == pytest.approx(790.0 * 64) and r["verdict"] == "piggyback"
    assert r["covered_fraction"] == 1.0


def test_audit_prediction_against_a_path_run_by_hand(fa3_run):
    from xstage_trace import open_run

    run = open_run(fa3_run)
    tiles = qloop_tiles(run.probes(), run.dumps())
    # K = 2 CTAs, B_t = 128·128·2 = 32768 B, V = 65536 B; R = 10 GB/s → V/R = 6553.6 ns; T_iss^0 = 500 ns
    host = PlatformModel(rate_gbps=10.0, issue_floor_ns={(2, 32768): 500.0}, capacity_by_producers={2: 1e6}, store_path="host")
    per_tile, s = piggyback_audit(tiles, {"host": host})
    r = s.set_index("path").loc["host"]
    assert r["recovery_gap_ns"] == pytest.approx(6053.6)
    assert r["isolated_excess_bytes"] == pytest.approx(65536 - 10.0 * 500)
    sigma = float(np.median(np.array([3000, 3200, 2800, 3100, 2900]) / 3))
    assert r["sigma_ns"] == pytest.approx(sigma)
    assert r["m_ub_tokens"] == 176 * math.ceil(6053.6 / sigma)
    # control gaps 3200, 2800, 2900 < G*: reshape, none covered
    assert r["verdict"] == "reshape" and r["covered_fraction"] == 0.0
    # after a burst the Q-loop is predicted at max(G, V/R − T_iss^0) = 6053.6; a CTA's first tile at its control Q-loop
    p = per_tile.sort_values(["cta", "position"])
    assert p["predicted_qloop_ns"].tolist() == pytest.approx([3000, 6053.6, 6053.6, 3100, 6053.6])
    assert p["measured_qloop_ns"].tolist() == [3000, 9000, 9500, 3100, 8800]
    assert r["predicted_qloop_median_ns"] == pytest.approx(6053.6) and r["measured_qloop_median_ns"] == 8800
    assert r["implied_rate_gbps"] == pytest.approx(65536 / (8800 + 300))


def test_piggyback_command_writes_the_table(fa3_run, tmp_path):
    from conftest import CALIB

    out = tmp_path / "pb.md"
    r = subprocess.run(EXE + ["piggyback", str(fa3_run), "--calibration", str(CALIB / "calibration_host.json"),
                              "--calibration", str(CALIB / "calibration_local.json"), "-o", str(out), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert sorted(x["path"] for x in rows) == ["host", "local"]
    host = next(x for x in rows if x["path"] == "host")
    assert host["measured_dump"] == "fa3_host_s520_noncausal.xsp" and host["tiles_joined"] == 5
    assert "| shape | path | G* (µs)" in out.read_text()


def test_piggyback_command_rejects_a_run_without_fa3_tiles(tmp_path):
    from conftest import CALIB

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    write_fa3_dump(dumps / "other.xsp", CONTROL, "kernel=other dest=local")
    from xstage_trace.pipeline.runner import analyze_inputs

    analyze_inputs([dumps], tmp_path / "run")
    out = tmp_path / "pb.md"
    r = subprocess.run(EXE + ["piggyback", str(tmp_path / "run"), "--calibration", str(CALIB / "calibration_host.json"), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no FA3 Q-loop tiles" in r.stderr
    assert not out.exists()
