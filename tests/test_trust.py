"""Issue 9: answers that are right or a clear error — pairing by data, bounded alignment, identified drift,
bursts as issue rounds, Table 3 timing scopes, one typed run configuration."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from conftest import CALIB, FUSED, SAMPLES, dump_bytes
from test_cli import run
from xstage_trace.base.errors import InputError
from xstage_trace.collectors.align import align_dumps
from xstage_trace.collectors.nsys_reader import read_nsys_export
from xstage_trace.collectors.nsys_rep import export_report
from xstage_trace.collectors.pairing import pair_dumps
from xstage_trace.base.probe_layout import HEADER_DTYPE
from xstage_trace.collectors.probe_format import decode_probe_dump
from xstage_trace.pipeline.runner import analyze_inputs

PEER = SAMPLES / "h200x2_peer" / "fused"
TILE_BYTES = 128 * 128 * 2  # one bf16 128×128 output tile (instrument/examples/fused_moe.cu)


def _one_error_line(r) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def peer_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("peer")
    a = analyze_inputs([PEER / "fused_rank0.nsys-rep", PEER / "fused_rank1.nsys-rep", PEER], d / "ab", warmup_launches=2)
    b = analyze_inputs([PEER / "fused_rank1.nsys-rep", PEER, PEER / "fused_rank0.nsys-rep"], d / "ba", warmup_launches=2)
    return a, b


def test_swapping_the_per_rank_reports_changes_nothing(peer_runs):
    a, b = peer_runs
    assert a["alignment"] == b["alignment"]
    assert a["alignment"]["rank0"]["report"] == "fused_rank0.nsys-rep"
    assert a["alignment"]["rank1"]["report"] == "fused_rank1.nsys-rep"
    assert a["backpressured_tiles"] == b["backpressured_tiles"] > 1000
    assert a["table3"] == b["table3"]


def test_reports_rank_comes_from_the_dumps_it_holds(peer_runs, tmp_path):
    import xstage_trace

    run_dir = peer_runs[0]["run_dir"]
    k = xstage_trace.open_run(run_dir).kernels()
    assert set(k.groupby("rank")["device_id"].unique().map(tuple)) == {(0,), (1,)}  # rank r traced GPU r
    assert (k["rank"] == k["device_id"]).all()


def test_peer_table3_times_are_the_slowest_rank_per_trial(peer_runs):
    import xstage_trace

    run = xstage_trace.open_run(peer_runs[0]["run_dir"])
    t3 = run.table3()
    t3 = t3[t3["schedule"] == "wave"].set_index("shape")
    k = run.kernels().dropna(subset=["nvtx_range"])
    k = k[k["nvtx_range"].str.contains("shape=S1 schedule=wave ")].sort_values("start_ns")
    # hand calculation: per rank, the first 2 launches are warm-ups, the rest trials 0..; per trial the slower rank; median.
    per_rank = [g["duration_ns"].to_numpy()[2:] for _, g in k.groupby("rank")]
    expect_ms = np.median(np.maximum(*per_rank)) / 1e6
    assert t3.loc["S1", "kernel_ns"] / 1e6 == pytest.approx(expect_ms, rel=1e-12)
    assert t3.loc["S1", "trials"] == len(per_rank[0]) == len(per_rank[1]) and t3.loc["S1", "ranks"] == 2


def test_report_from_another_capture_is_refused(tmp_path):
    out = tmp_path / "run"
    r = run("analyze", PEER / "fused_rank0.nsys-rep", FUSED / "traced", "-o", out)
    line = _one_error_line(r)
    assert "fused_rank0.nsys-rep" in line and "fused_host_S1" in line and "probes' own clock" in line
    assert not out.exists()


def test_report_that_never_traced_the_dumps_gpu_is_refused(tmp_path):
    dumps = tmp_path / "rank1"
    dumps.mkdir()
    for p in PEER.glob("fused_peer_rank1_*.xsp*"):
        shutil.copy(p, dumps / p.name)
    line = _one_error_line(run("analyze", PEER / "fused_rank0.nsys-rep", dumps, "-o", tmp_path / "run"))
    assert "traced no kernel on GPU 1" in line


def test_a_clock_two_seconds_off_is_refused():
    export = read_nsys_export(export_report(FUSED / "traced" / "fused_reference.nsys-rep")[0])
    dumps = [decode_probe_dump(p) for p in sorted((FUSED / "traced").glob("*.xsp*"))]
    assert len(pair_dumps([export], dumps)) == 1  # the true capture holds them
    shifted = dataclasses.replace(export, utc_epoch_ns=export.utc_epoch_ns + 2_000_000_000)
    with pytest.raises(InputError, match="(holds 0 of 8|ms off its clock)"):
        pair_dumps([shifted], dumps)


def test_probe_times_are_finite_and_inside_their_kernels(peer_runs):
    import xstage_trace

    run = xstage_trace.open_run(peer_runs[0]["run_dir"])
    p, k, d = run.probes(), run.kernels(), run.dumps()
    assert np.isfinite(p["t_ns"]).all()
    span = p.groupby(["rank", "dump"], observed=True)["t_ns"].agg(["min", "max"]).reset_index()
    span = span.merge(d[["rank", "dump", "kernel_index"]], on=["rank", "dump"])
    kern = k.iloc[span["kernel_index"].to_numpy()]
    assert (kern["start_ns"].to_numpy() <= span["min"].to_numpy()).all()
    assert (span["max"].to_numpy() <= kern["end_ns"].to_numpy()).all()


def test_reports_without_dumps_need_their_rank_named(tmp_path):
    r = run("analyze", PEER / "fused_rank0.nsys-rep", PEER / "fused_rank1.nsys-rep", "-o", tmp_path / "run")
    assert "--rank fused_rank0.nsys-rep=N" in _one_error_line(r)
    ok = run("analyze", PEER / "fused_rank0.nsys-rep", PEER / "fused_rank1.nsys-rep", "--rank", "fused_rank0.nsys-rep=0",
             "--rank", "fused_rank1.nsys-rep=1", "-o", tmp_path / "run", "--json")
    assert ok.returncode == 0, ok.stderr
    import xstage_trace

    k = xstage_trace.open_run(tmp_path / "run").kernels()
    assert (k["rank"] == k["device_id"]).all()


def _synthetic_capture(drift_ppm: float, n: int = 60, slack_ns: float = 200.0):
    rng = np.random.default_rng(7)
    dur = rng.uniform(2e5, 2e6, n)
    ks = np.cumsum(dur + rng.uniform(1e7, 2e8, n)) - dur  # kernels over ~6 s
    ke = ks + dur
    a_true, b_true = ks + slack_ns, ke - slack_ns  # each dump fills its kernel but for 200 ns at either end
    off, d = 87_000.0, drift_ppm * 1e-6
    return a_true + off + d * a_true, b_true + off + d * b_true, ks, ke


def test_a_known_drift_is_identified():
    a, b, ks, ke = _synthetic_capture(5.0)
    doc = align_dumps(a, b, ks, ke).as_dict()
    assert doc["drift_ppm"] == pytest.approx(5.0, abs=1.0) and doc["drift_uncertainty_ppm"] <= 1.0


def test_an_unidentifiable_drift_is_not_reported():
    a, b, ks, ke = _synthetic_capture(5.0, n=2, slack_ns=5e4)  # two loose dumps allow a wide range of slopes
    doc = align_dumps(a, b, ks, ke).as_dict()
    assert doc["drift_ppm"] is None and doc["drift_range_ppm"][1] - doc["drift_range_ppm"][0] > 2.0


def test_calibration_bursts_are_what_the_benchmark_issued(tmp_path):
    """Every quick-sweep dump yields exactly the benchmark's `bursts` rounds of V = K·B bytes from K producers
    (K, B and bursts as the benchmark wrote them into its label)."""
    analyze_inputs([CALIB / "quick"], tmp_path / "run")
    import xstage_trace

    run = xstage_trace.open_run(tmp_path / "run")
    b = run.bursts().merge(run.dumps()[["dump", "K", "B", "bursts"]], on="dump")
    per_dump = b.groupby("dump").agg(n=("burst", "size"), issued=("bursts", "first"))
    assert len(per_dump) == 22 and (per_dump["n"] == per_dump["issued"]).all()
    assert (b["volume_bytes"] == b["K"] * b["B"]).all() and (b["producers"] == b["K"]).all()
    assert (b.dropna(subset=["gap_ns"])["gap_ns"] >= 0).all()


def test_fused_wave_bursts_are_rounds_of_one_tile_per_cta(peer_runs):
    import xstage_trace

    b = xstage_trace.open_run(peer_runs[0]["run_dir"]).bursts()
    w = b[(b["shape"] == "S1") & (b["schedule"] == "wave")]
    # 4224 Linear-2 tiles over 132 CTAs: 32 rounds per dump, each 132 tiles of 32 KiB.
    assert w.groupby(["rank", "dump"]).size().eq(4224 // 132).all()
    assert (w["producers"] == 132).all() and (w["volume_bytes"] == 132 * TILE_BYTES).all()


def test_table3_predicts_both_ways_from_the_tiles(peer_runs):
    import xstage_trace

    run = xstage_trace.open_run(peer_runs[0]["run_dir"])
    t3, tiles = run.table3(), run.tiles()
    t3 = t3[t3["schedule"] == "wave"].set_index("shape")
    g = tiles[(tiles["shape"] == "S1")]
    l2w = g[(g["tile_kind"] == "linear2") & (g["schedule"] == "wave")]
    span, cover = l2w["rs_span_ns"].median(), l2w["cover_ns"].median()
    assert t3.loc["S1", "slot_pred_medians_ns"] == pytest.approx(max(span - cover, 0.0))  # the paper's form, on medians
    assert t3.loc["S1", "slot_pred_ns"] == pytest.approx((l2w["rs_span_ns"] - l2w["cover_ns"]).clip(lower=0).median())
    err = (l2w["predicted_stall_ns"] - l2w["measured_stall_ns"]).abs().dropna()
    assert t3.loc["S1", "slot_err_mean_ns"] == pytest.approx(err.mean())


def _with_label(tmp_path, label: bytes):
    raw = bytearray(dump_bytes(CALIB / "quick" / "host_periodic_K132_B8192_G0.xsp.zst"))
    off = HEADER_DTYPE.fields["label"][1]
    raw[off:off + 256] = label.ljust(256, b"\0")
    p = tmp_path / "relabelled.xsp"
    p.write_bytes(bytes(raw))
    return p


@pytest.mark.parametrize("label,key", [(b"dest=host mode=periodic K=13x2 B=8192 G_ns=0", "K"),
                                       (b"dest=host mode=sometimes K=132 B=8192 G_ns=0", "mode"),
                                       (b"dest=host K=132 K=66", "K"),
                                       (b"rank=3 dest=host", "rank")])
def test_a_malformed_run_configuration_names_its_key(tmp_path, label, key):
    p = _with_label(tmp_path, label)
    line = _one_error_line(run("analyze", p, "-o", tmp_path / "run"))
    assert p.name in line and f"{key}" in line


def test_the_run_configuration_is_stored_as_columns(tmp_path):
    p = _with_label(tmp_path, b"dest=host mode=periodic K=132 B=8192 G_ns=0 bursts=64 site=lab7")
    r = run("analyze", p, "-o", tmp_path / "run", "--json")
    assert r.returncode == 0, r.stderr
    d = pd.read_parquet(tmp_path / "run" / "dumps.parquet").iloc[0]
    assert (d["dest"], d["mode"], d["K"], d["B"], d["gap_ns"], d["bursts"], d["extra"]) == ("host", "periodic", 132, 8192, 0.0, 64, "site=lab7")
    assert json.loads(r.stdout)["dumps"] == 1


def test_burst_audit_uses_the_offered_gap_and_only_its_own_store_path(tmp_path):
    """ρ_n = V_n / (R·(T_iss^0 + G_n)) (docs/model.md §4) with G_n the next Linear-2 mainloop in the wave schedule,
    by hand from the calibration JSON; the host calibration does not audit the local control."""
    import xstage_trace
    from xstage_trace.dataset.calibration import load_platform

    calib = SAMPLES / "h200_calibration" / "calibration_host.json"
    analyze_inputs([FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"], tmp_path / "run", calibration=calib, warmup_launches=2)
    run = xstage_trace.open_run(tmp_path / "run")
    b, tiles, m = run.bursts(), run.tiles(), load_platform(calib)
    w = b[(b["dest"] == "host") & (b["shape"] == "S1") & (b["schedule"] == "wave")].dropna(subset=["gap_ns"])
    ml2 = tiles[(tiles["dest"] == "host") & (tiles["shape"] == "S1") & (tiles["tile_kind"] == "linear2")]["mainloop_ns"].median()
    assert w["gap_ns"].median() == pytest.approx(ml2, rel=0.02)
    V = 132 * TILE_BYTES
    rho = V / (m.rate_gbps * (float(m.floor_ns(np.array([132]), np.array([TILE_BYTES]))[0]) + ml2))  # GB/s = bytes/ns
    assert w["rho"].median() == pytest.approx(rho, rel=0.05) and rho > 5
    local = b[b["dest"] == "local"]
    assert len(local) and local["rho"].isna().all()


def test_sha256_without_following_refuses_links_and_hashes_regular_files(tmp_path):
    import hashlib

    from xstage_trace.base.hashing import sha256_of

    f = tmp_path / "a.bin"
    f.write_bytes(b"xstage" * 1000)
    (tmp_path / "link").symlink_to(f)
    want = hashlib.sha256(b"xstage" * 1000).hexdigest()
    assert sha256_of(f, chunk_bytes=7, follow_symlinks=False) == sha256_of(tmp_path / "link") == want
    with pytest.raises(OSError):
        sha256_of(tmp_path / "link", follow_symlinks=False)
    with pytest.raises(OSError):
        sha256_of(tmp_path, follow_symlinks=False)


def test_files_hashed_on_threads_get_each_its_own_sha256_in_order(tmp_path):
    """``hash_all`` (the run's inputs and outputs are hashed on threads) gives what hashlib gives for
    each file alone, in the order asked; a file that cannot be read is an error, not a missing entry."""
    import hashlib

    from xstage_trace.base.hashing import hash_all, sha256_of

    paths = []
    for i in range(9):
        p = tmp_path / f"f{i}"
        p.write_bytes(bytes([i]) * (i * 700_001))  # sizes over and under one read chunk; one empty file
        paths.append(p)
    assert hash_all(sha256_of, paths) == [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    with pytest.raises(OSError):
        hash_all(sha256_of, [*paths, tmp_path / "missing"])
