"""DeepGEMM sm_90 dumps (recipe deepgemm-sm90) in the tile analysis and the store-wait comparison.

Hand-built dumps with a known answer: two CTAs of three tiles each, the math role (slice role 0)
recording mainloop, store_wait and epilogue spans, the producer role (1) the schedule marks. At
1 GHz one clock cycle is one nanosecond, so every expected number below is arithmetic on the
timeline the test writes. The real H200 dumps (sample_traces/h200_deepgemm/dumps) are
checked against the GEMM's own size: a launch stores all of D, M·N·sizeof(bf16) bytes.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.stall import round_rate_gbps, store_stall_predictions, store_wait_summary, store_wait_vs_model
from xstage_trace.base.probe_layout import RECORD_DTYPE, SLICE_DTYPE
from xstage_trace.instrument.probe_writer import write_probe_dump

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ["mainloop", "store_wait", "epilogue", "schedule"]  # the recipe's event ids, in order
MAINLOOP, STORE_WAIT, EPILOGUE, SCHEDULE = range(4)
MARK, BEGIN, END = range(3)
TILE_BYTES = 65536  # BLOCK_M × BLOCK_N × sizeof(bf16) for a 128 × 256 block
CTAS, TILES = 2, 3
GROUPS = (0, 0, 1)  # the scheduler's group index of each tile position
WAIT_NS, EPILOGUE_NS, STEP_NS = 80, 500, 20  # store wait at its floor, epilogue span, gap between probes


def _record(clock: int, event: int, kind: int, tile: int, payload: int = 0) -> tuple:
    return (clock | (event << 48) | (kind << 56), tile, payload)


def _timeline(mainloops_ns, waits_ns, start_ns: int = 1000) -> tuple[list[tuple], list[int]]:
    """One CTA's math records: per tile mainloop, store_wait, epilogue (end payload = tile bytes),
    back to back with STEP_NS between probes; also the epilogue begin times."""
    recs, t, epi = [], start_ns, []
    for i, (ml, w) in enumerate(zip(mainloops_ns, waits_ns)):
        tile = (i << 16) | 0
        for event, dur, payload in ((MAINLOOP, ml, 0), (STORE_WAIT, w, 0), (EPILOGUE, EPILOGUE_NS, TILE_BYTES)):
            if event == EPILOGUE:
                epi.append(t)
            recs += [_record(t, event, BEGIN, tile), _record(t + dur, event, END, tile, payload)]
            t += dur + STEP_NS
    return recs, epi


def _write(path: Path, dest: str, mainloops, waits) -> dict:
    """A dump of CTAS CTAs; ``mainloops[c]``/``waits[c]``: CTA c's per-tile spans. Returns the epilogue
    begin times per CTA."""
    capacity = 4 * TILES * 2
    meta = np.zeros(CTAS * 2, SLICE_DTYPE)
    recs = np.zeros((CTAS * 2, capacity), RECORD_DTYPE)
    epi = {}
    for c in range(CTAS):
        math_recs, epi[c] = _timeline(mainloops[c], waits[c])
        sched = [_record(900 + i, SCHEDULE, MARK, (i << 16) | 0, GROUPS[i]) for i in range(TILES)]
        for s, rows in ((2 * c, math_recs), (2 * c + 1, sched)):
            recs[s, : len(rows)] = rows
            meta[s] = (len(rows), 1, c, c, 10**9, 0, 10**9 + 10**6, 10**6)  # 1 ns per cycle over 1 ms of anchors
    label = f"kernel=deepgemm_gemm_nt dest={dest} shape=m256n256k1024 layout=tma_store operands=fp8 epilogue=bf16 ctas={CTAS}"
    write_probe_dump(path, slice_meta=meta, records=recs, capacity=capacity, event_names=EVENTS, gpu_name="NVIDIA H200",
                     sm_count=132, sm_clock_khz=1_000_000, roles_per_cta=2, label=label)
    return epi


CONTROL_ML = [[10_000] * TILES] * CTAS
HOST_ML = [[10_000, 50_000, 50_000]] * CTAS  # the first tile runs before any store is in flight
HOST_WAITS = [[WAIT_NS, WAIT_NS + 3000, WAIT_NS], [WAIT_NS] * TILES]  # CTA 0 waits 3 µs for tile 0's store


@pytest.fixture(scope="module")
def dg_run(tmp_path_factory):
    from xstage_trace import open_run
    from xstage_trace.pipeline.runner import analyze_inputs

    d = tmp_path_factory.mktemp("dg")
    dumps = d / "dumps"
    dumps.mkdir()
    _write(dumps / "local.xsp", "local", CONTROL_ML, [[WAIT_NS] * TILES] * CTAS)
    epi = _write(dumps / "host.xsp", "host", HOST_ML, HOST_WAITS)
    analyze_inputs([dumps], d / "run")
    return open_run(d / "run"), epi


def test_tiles_follow_the_one_staging_buffer_layout(dg_run):
    run, _ = dg_run
    t = run.tiles().sort_values(["dest", "cta", "position"])
    assert len(t) == 2 * CTAS * TILES and set(t["tile_kind"]) == {"gemm"}
    host = t[t["dest"] == "host"]
    for c in range(CTAS):
        h = host[host["cta"] == c]
        assert h["tile"].tolist() == [i << 16 for i in range(TILES)]  # scheduler order on the CTA
        assert h["expert"].tolist() == list(GROUPS)  # the schedule mark's group index
        assert h["mainloop_ns"].tolist() == HOST_ML[c]
        assert h["epilogue_span_ns"].tolist() == [EPILOGUE_NS] * TILES
        # one staging buffer, waited for after the next mainloop: T_cover(i) = mainloop(i+1) and
        # tile i's wait is the store_wait recorded on tile i+1
        assert h["cover_ns"].tolist()[:2] == HOST_ML[c][1:] and math.isnan(h["cover_ns"].iloc[2])
        assert h["slot_wait_ns"].tolist()[:2] == HOST_WAITS[c][1:] and math.isnan(h["slot_wait_ns"].iloc[2])
    # floor = the control's median wait (80 ns): only CTA 0's tile 0 waited beyond it, by 3000 ns
    assert host["wait_floor_ns"].eq(WAIT_NS).all()
    stall = host.dropna(subset=["measured_stall_ns"]).set_index(["cta", "position"])["measured_stall_ns"]
    assert stall.to_dict() == {(0, 0): 3000.0, (0, 1): 0.0, (1, 0): 0.0, (1, 1): 0.0}
    # the 40 µs longer mainloops of the host run are the inflation the diagnosis names
    assert (host.set_index(["cta", "position"])["diagnosis"].to_dict()
            == {(c, p): ("mainloop_inflation" if p else "none") if (c, p) != (0, 0) else "slot_backpressure"
                for c in range(CTAS) for p in range(TILES)})


def test_bursts_are_the_rounds_of_tma_stores(dg_run):
    run, epi = dg_run
    b = run.bursts()
    host = b[b["dest"] == "host"].sort_values("burst")
    assert host["burst"].tolist() == list(range(TILES))
    assert host["volume_bytes"].eq(CTAS * TILE_BYTES).all() and host["producers"].eq(CTAS).all()
    starts = [min(e[i] for e in epi.values()) for i in range(TILES)]  # a round starts with its first store
    assert (host["start_ns"] - host["start_ns"].iloc[0]).tolist() == [s - starts[0] for s in starts]
    # round rate: the bytes of rounds 0 and 1 over the time from round 0's start to round 2's
    rate = round_rate_gbps(b).xs("host.xsp", level="dump").iloc[0]
    assert rate == pytest.approx(2 * CTAS * TILE_BYTES / (starts[2] - starts[0]))


# A path with R = 1 GB/s (1 byte/ns), T_iss^0 = 1000 ns at (K=2, B=64 KiB), Q = 100,000 bytes, o = 0:
# V = 131,072 bytes, G = 10,000 ns (the control's mainloop). docs/model.md §4 extension by hand:
#   burst 0: q=0,      T_iss = max(1000, (0 + 131072 − 100000)/1)      =  31,072 → q' = 131072 − 41072  = 90,000
#   burst 1: q=90,000, T_iss = max(1000, (90000 + 131072 − 100000)/1)  = 121,072 → q' = 221072 − 131072 = 90,000
#   burst 2: the same backlog: T_iss = 121,072. Stall = T_iss − T_iss^0.
HOST_PATH = PlatformModel(rate_gbps=1.0, issue_floor_ns={(2, TILE_BYTES): 1000.0}, capacity_by_producers={2: 100_000.0}, store_path="host")
HOST_STALL_NS = [30_072.0, 120_072.0, 120_072.0]
# Without a capacity (the local control's calibration has none): Eq. 1, ΔT_iss = [V/R − G − T^0]₊,
# R = 10 GB/s: 13,107.2 − 10,000 − 1,000 = 2,107.2 ns; the last burst has an unbounded gap: 0.
LOCAL_PATH = PlatformModel(rate_gbps=10.0, issue_floor_ns={(2, TILE_BYTES): 1000.0}, store_path="local")
LOCAL_STALL_NS = [2107.2, 2107.2, 0.0]


def test_predicted_store_stall_is_the_stalled_trajectory(dg_run):
    run, _ = dg_run
    b = run.bursts()
    host, local = (b[b["dest"] == d].sort_values("burst") for d in ("host", "local"))
    stall, rate = store_stall_predictions(host, 10_000.0, HOST_PATH)
    assert rate == 1.0 and stall.tolist() == pytest.approx(HOST_STALL_NS)
    stall, _ = store_stall_predictions(local, 10_000.0, LOCAL_PATH)
    assert stall.tolist() == pytest.approx(LOCAL_STALL_NS)


def test_store_wait_vs_model_per_tile_and_per_case(dg_run):
    run, _ = dg_run
    per_tile = store_wait_vs_model(run.tiles(), run.bursts(), {"host": HOST_PATH, "local": LOCAL_PATH})
    host = per_tile[per_tile["dest"] == "host"].set_index(["cta", "position"]).sort_index()
    assert host["gap_ns"].eq(10_000).all()  # the control's median mainloop, not the host's inflated one
    assert host["predicted_stall_ns"].tolist() == pytest.approx(HOST_STALL_NS * CTAS)
    assert host["mainloop_excess_ns"].dropna().tolist() == [40_000.0] * 4  # 50 µs next mainloop − 10 µs offered
    s = store_wait_summary(per_tile, run.bursts()).set_index("dest")
    h = s.loc["host"]
    assert h["tiles"] == 4 and h["rate_model_gbps"] == 1.0  # tiles with a successor
    assert h["wait_mae_us"] == pytest.approx((27_072 + 120_072 + 30_072 + 120_072) / 4 / 1e3)
    assert h["excess_mae_us"] == pytest.approx((9_928 + 80_072) / 2 / 1e3)
    # ranks of pred (1.5, 3.5, 1.5, 3.5) against the waits' (4, 2, 2, 2): ρ = −2/√12
    assert h["wait_spearman"] == pytest.approx(-1 / math.sqrt(3))
    assert math.isnan(h["excess_spearman"])  # the excess is the same 40 µs on every tile: no ranking
    assert s.loc["local", "pred_median_us"] == pytest.approx(2.1072)


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xstage_trace", *map(str, args)], capture_output=True, text=True)


def test_store_wait_command_writes_the_table_and_refuses_a_foreign_calibration(dg_run, tmp_path):
    run, _ = dg_run
    host_cal = ROOT / "sample_traces/h200_calibration/calibration_host.json"
    out = tmp_path / "sw.md"
    r = _cli("store-wait", run.path, "--calibration", host_cal, "-o", out, "--csv", tmp_path / "sw.csv")
    assert r.returncode == 0, r.stderr
    rows = pd.read_csv(tmp_path / "sw.csv")
    assert rows["dest"].tolist() == ["host"]  # the local control has no calibration given: left out
    assert "| host | m256n256k1024 | 4 |" in out.read_text()
    peer = tmp_path / "peer.json"
    peer.write_text(host_cal.read_text().replace('"store_path": "host"', '"store_path": "peer0to1"'))
    r = _cli("store-wait", run.path, "--calibration", peer, "-o", tmp_path / "none.md")
    assert r.returncode == 2 and str(peer) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none.md").exists()


SHAPE = re.compile(r"^m(\d+)n(\d+)k\d+$")


@pytest.fixture(scope="module")
def h200_run(tmp_path_factory):
    """The committed H200 run's probe dumps (sample_traces/h200_deepgemm/dumps), analyzed."""
    from xstage_trace import open_run
    from xstage_trace.pipeline.runner import analyze_inputs

    tmp = tmp_path_factory.mktemp("h200_dg")
    analyze_inputs([ROOT / "sample_traces/h200_deepgemm/dumps"], tmp / "run")
    return open_run(tmp / "run")


def test_real_h200_launches_store_all_of_d(h200_run):
    """Every plain fp8_gemm_nt launch of the committed H200 run stores D once: Σ of its store rounds
    = M·N·2 bytes (bf16), the shape being the one the bench launched (its dump label)."""
    b = h200_run.bursts()
    plain = b[b["shape"].str.match(SHAPE)]
    assert plain["dump"].nunique() >= 2
    for (shape, dump), g in plain.groupby(["shape", "dump"]):
        m, n = map(int, SHAPE.match(shape).groups())
        assert g["volume_bytes"].sum() == m * n * 2, (dump, shape)
    t = h200_run.tiles()
    assert set(t["tile_kind"]) == {"gemm"} and t["slot_wait_ns"].notna().any()


def test_real_h200_mainloop_begins_where_the_previous_epilogue_ended(h200_run):
    """The math probe's contract (deep_gemm/xstage/sm90_trace.cuh): nothing runs at the tile loop's top, a
    tile's mainloop-begin record takes the previous tile's epilogue-end clock (timestamp half written at
    that tile's end, tile half at its own end), so on every math slice of the real launches begin(i+1) ==
    epilogue end(i) to the cycle, and each begin carries the tile of the mainloop end it pairs with."""
    p = h200_run.probes()
    math_slices = p[p["event"] == "mainloop"]
    key = ["dump", "slice"]
    begins = math_slices[math_slices["kind"] == "begin"].sort_values([*key, "clock"])
    ends = math_slices[math_slices["kind"] == "end"].sort_values([*key, "clock"])
    epi_ends = p[(p["event"] == "epilogue") & (p["kind"] == "end")].sort_values([*key, "clock"])
    assert len(begins) == len(ends) == len(epi_ends) > 0
    assert (begins["tile"].to_numpy() == ends["tile"].to_numpy()).all()
    nxt = begins.groupby(key).nth(slice(1, None))  # every tile but each slice's first
    prev = epi_ends.groupby(key).nth(slice(None, -1))  # every tile but each slice's last
    assert len(nxt) == len(prev) == len(begins) - begins.groupby(key).ngroups
    assert (nxt["clock"].to_numpy() == prev["clock"].to_numpy()).all()


def _summarize():
    """sample_traces/h200_deepgemm/run/summarize.py (a script beside the bench, not a package module)."""
    import importlib.util

    path = ROOT / "sample_traces/h200_deepgemm/run/summarize.py"
    spec = importlib.util.spec_from_file_location("dg_summarize", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_paired_bootstrap_cancels_shared_trial_noise():
    """Traced = cleared × 1.01 in every trial, the trials themselves spread ±5 %: the ratio of medians is
    +1 % exactly and, resampled in pairs, every resample gives +1 % (median(1.01·x) = 1.01·median(x)), so the
    paired interval is the point; resampled on their own, the two sides' spread widens the interval."""
    s = _summarize()
    rng = np.random.default_rng(7)
    cleared = 0.4 * (1 + 0.05 * rng.standard_normal(201))
    traced = cleared * 1.01
    point, lo, hi = s.ratio_interval_pct(traced, cleared, paired=True, rng=np.random.default_rng(0))
    assert (point, lo, hi) == pytest.approx((1.0, 1.0, 1.0), abs=1e-9)
    point_u, lo_u, hi_u = s.ratio_interval_pct(traced, cleared, paired=False, rng=np.random.default_rng(0))
    assert point_u == pytest.approx(1.0, abs=1e-9) and lo_u < 0.5 and hi_u > 1.5


def test_committed_overhead_table_is_the_medians_of_the_committed_trials():
    """overhead.json's medians are those of the raw per-trial times in the three summaries, every mode of every
    case has the trials the bench ran, and the traced and cleared outputs were bitwise equal."""
    import json

    d = ROOT / "sample_traces/h200_deepgemm"
    c1, p, c2 = (json.loads((d / f"summary_{n}.json").read_text()) for n in ("clean_1", "patched", "clean_2"))
    rows = {(r["case"], r["dest"], r["protocol"]): r for r in json.loads((d / "overhead.json").read_text())}
    assert len(rows) == 2 * len(p["cases"])
    for a1, pc, a2 in zip(c1["cases"], p["cases"], c2["cases"]):
        assert pc["bitwise_equal_traced_cleared"]
        for protocol, key, n in (("single", "times_ms", p["trials"]), ("batch", "batch_ms", p["batch_trials"])):
            r = rows[(pc["case"], pc["dest"], protocol)]
            assert all(len(x[key][m]) == n for x, m in ((a1, "clean"), (a2, "clean"), (pc, "traced"), (pc, "cleared")))
            assert r["traced_ms"] == pytest.approx(float(np.median(pc[key]["traced"])))
            assert r["cleared_ms"] == pytest.approx(float(np.median(pc[key]["cleared"])))
            assert r["clean_1_ms"] == pytest.approx(float(np.median(a1[key]["clean"])))
            assert r["traced_vs_cleared_pct"] == pytest.approx(100 * (r["traced_ms"] / r["cleared_ms"] - 1))
            assert r["traced_vs_cleared_lo_pct"] <= r["traced_vs_cleared_pct"] <= r["traced_vs_cleared_hi_pct"]
