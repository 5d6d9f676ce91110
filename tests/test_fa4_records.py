"""FA4 per-tile rows (recipe fa4) to probe dumps: hand-built rows with hand-computed slices, times,
tile ids and SM clock, the piggyback's tile table on the converted dumps, bad input, and the
converter script as the device run's post-processing calls it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xstage_trace.analysis.piggyback import decode_tile_id, qloop_tiles
from xstage_trace.base.errors import InputError
from xstage_trace.instrument.targets.fa4.records import pack_tile_ids, rows_to_slices, write_fa4_dump
from xstage_trace.collectors.probe_format import decode_probe_dump

CONVERT = Path(__file__).resolve().parents[1] / "sample_traces/h200_fa4/run/convert.py"
LABEL = ("kernel=fa4 dest=local shape=b1h2s256n tiles=3 ctas=4 slice=sm batch=1 heads=2 seqlen=256 causal=0 "
         "block_m=128 block_n=128 head_dim=128 out_bytes=2 trial=0")


def row(cta, clk_begin, clk_mainloop, clk_end, gt_begin, gt_end, smid, written=1):
    return [cta, clk_begin, clk_mainloop, clk_end, gt_begin, gt_end, smid, written]


def fixture_rows() -> np.ndarray:
    """batch 1, heads 2, m blocks 2. SM 7 runs (h1, m0) then (h0, m1) at 1.6 cycles/ns; SM 3 runs (h0, m0)
    at 2 cycles/ns; (h1, m1) was never written."""
    rows = np.zeros((1, 2, 2, 8), np.int64)
    # SM 7, opened at clock 10_000 / 5_000_000 ns: mainloop 10 µs (16_000 cycles), epilogue 1 µs; 800 cycles
    # (0.5 µs) later the next CTA: mainloop 15 µs (24_000), epilogue 2 µs (3_200); close at 45_600 cycles = 28.5 µs
    rows[0, 1, 0] = row(2, 10_000, 26_000, 27_600, 5_000_000, 5_011_000, 7)
    rows[0, 0, 1] = row(1, 28_400, 52_400, 55_600, 5_011_500, 5_028_500, 7)
    # SM 3: mainloop 20 µs (40_000 cycles), epilogue 1 µs (2_000): 42_000 cycles in 21 µs
    rows[0, 0, 0] = row(0, 2_000_000, 2_040_000, 2_042_000, 5_000_100, 5_021_100, 3)
    rows[0, 1, 1] = row(3, 1, 2, 3, 4, 5, 9, written=0)
    return rows


def test_pack_tile_ids_is_fa3s_packing_and_refuses_what_does_not_fit():
    ids = pack_tile_ids([0, 3, 255], [1, 15, 4095], [0, 7, 4095])
    assert ids.tolist() == [1 << 12, 3 << 24 | 15 << 12 | 7, 255 << 24 | 4095 << 12 | 4095]
    m, h, b = decode_tile_id(ids)
    assert m.tolist() == [0, 7, 4095] and h.tolist() == [1, 15, 4095] and b.tolist() == [0, 3, 255]
    assert pack_tile_ids([256], [0], [0]) is None and pack_tile_ids([0], [0], [4096]) is None


def test_slices_are_sms_in_smid_order_with_first_start_and_last_end_as_anchors():
    meta, records, capacity, khz = rows_to_slices(fixture_rows())
    assert meta["smid_open"].tolist() == [3, 7] and meta["smid_close"].tolist() == [3, 7]
    assert meta["count"].tolist() == [4, 8] and capacity == 8 and meta["closed"].tolist() == [1, 1]
    assert meta["gt_open"].tolist() == [5_000_100, 5_000_000] and meta["clk_open"].tolist() == [2_000_000, 10_000]
    assert meta["gt_close"].tolist() == [5_021_100, 5_028_500] and meta["clk_close"].tolist() == [2_042_000, 55_600]
    # median of the SMs' rates, 2.0 and 1.6 cycles per ns
    assert khz == 1_800_000
    assert records.shape == (2, 8)


def test_decoded_dump_has_the_hand_computed_spans_and_tile_ids(tmp_path):
    path = tmp_path / "fa4_local_s256_noncausal.xsp"
    info = write_fa4_dump(path, fixture_rows(), gpu_name="NVIDIA H200", sm_count=132, label=LABEL)
    assert info == {"slices": 2, "tiles": 3, "sm_clock_khz": 1_800_000}
    d = decode_probe_dump(path)
    assert d.warnings == [] and d.event_names == ["mainloop", "epilogue"]
    r = d.records.to_pandas()
    assert r["slice"].tolist() == [0] * 4 + [1] * 8 and r["sm_id"].tolist() == [3] * 4 + [7] * 8
    assert r["event"].astype(str).tolist() == ["mainloop", "mainloop", "epilogue", "epilogue"] * 3
    assert r["kind"].astype(str).tolist() == ["begin", "end"] * 6
    # SM 3: tile (b0, h0, m0); SM 7 in clock order: (b0, h1, m0) = 1 << 12, then (b0, h0, m1) = 1
    assert r["tile"].tolist() == [0] * 4 + [4096] * 4 + [1] * 4
    # per-slice clocks: SM 3 at 0.5 ns per cycle, SM 7 at 0.625 ns per cycle, from the open anchor
    assert r["t_gt_ns"].tolist() == [5_000_100, 5_020_100, 5_020_100, 5_021_100,
                                     5_000_000, 5_010_000, 5_010_000, 5_011_000,
                                     5_011_500, 5_026_500, 5_026_500, 5_028_500]


def test_piggyback_tiles_take_the_next_tile_on_the_same_sm_as_the_gap(tmp_path):
    from xstage_trace import open_run
    from xstage_trace.pipeline.runner import analyze_inputs

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    write_fa4_dump(dumps / "fa4_local_s256_noncausal.xsp", fixture_rows(), gpu_name="NVIDIA H200", sm_count=132, label=LABEL)
    analyze_inputs([dumps], tmp_path / "run")
    run = open_run(tmp_path / "run")
    t = qloop_tiles(run.probes(), run.dumps()).sort_values(["cta", "position"])
    assert t["mainloop_ns"].tolist() == [20_000, 10_000, 15_000] and t["epilogue_ns"].tolist() == [1_000, 1_000, 2_000]
    assert t["m_block"].tolist() == [0, 0, 1] and t["head"].tolist() == [0, 1, 0] and t["position"].tolist() == [0, 0, 1]
    # SM 3's only tile and SM 7's last tile have no next tile; SM 7's first is followed by a 15 µs Q-loop
    g = t["gap_after_ns"].tolist()
    assert math.isnan(g[0]) and g[1] == 15_000 and math.isnan(g[2])
    assert t["kv_blocks"].tolist() == [2, 2, 2]  # ⌈256 / 128⌉, non-causal


def test_bad_rows_are_input_errors():
    with pytest.raises(InputError, match="expected \\(batch, heads, m_blocks, 8\\) int64"):
        rows_to_slices(np.zeros((2, 2, 8), np.int64))
    with pytest.raises(InputError, match="expected"):
        rows_to_slices(fixture_rows().astype(np.float64))
    with pytest.raises(InputError, match="no FA4 row is marked written"):
        rows_to_slices(np.zeros((1, 1, 1, 8), np.int64))
    big = np.zeros((257, 1, 1, 8), np.int64)
    big[256, 0, 0] = row(0, 1, 2, 3, 40_000, 40_001, 0)
    with pytest.raises(InputError, match="do not fit"):
        rows_to_slices(big)


def _res_dir(tmp_path: Path, rows: np.ndarray) -> Path:
    res = tmp_path / "res"
    (res / "rows").mkdir(parents=True)
    case = {"name": "fa4_local_s256_noncausal", "dest": "local", "seqlen": 256, "causal": 0, "batch": 1, "heads": 2,
            "head_dim": 128, "block_m": 128, "block_n": 128, "out_bytes": 2, "trial": 0}
    np.savez_compressed(res / "rows" / f"{case['name']}.npz", rows=rows, meta=json.dumps(case))
    (res / "bench.json").write_text(json.dumps({"gpu_name": "NVIDIA H200", "sm_count": 132, "cases": [case]}))
    return res


def test_convert_script_labels_the_geometry_the_audit_reads(tmp_path):
    out = tmp_path / "dumps"
    r = subprocess.run([sys.executable, str(CONVERT), str(_res_dir(tmp_path, fixture_rows())), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = decode_probe_dump(out / "fa4_local_s256_noncausal.xsp")
    words = dict(w.split("=", 1) for w in d.header["label"].split())
    assert {k: words[k] for k in ("kernel", "dest", "shape", "seqlen", "causal", "block_m", "block_n", "tiles")} == {
        "kernel": "fa4", "dest": "local", "shape": "b1h2s256n", "seqlen": "256", "causal": "0", "block_m": "128",
        "block_n": "128", "tiles": "3"}


def test_convert_script_bad_rows_exit_2_with_one_line_and_no_dump(tmp_path):
    out = tmp_path / "dumps"
    r = subprocess.run([sys.executable, str(CONVERT), str(_res_dir(tmp_path, np.zeros((1, 1, 1, 8), np.int64))), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "fa4_local_s256_noncausal.npz" in r.stderr
    assert not list(out.glob("*.xsp*"))
