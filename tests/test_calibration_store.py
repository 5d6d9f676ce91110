"""The calibration bench's store instruction (``burst_gap --store stg|bulk|tensor2d``): its label key read by
analyze, one fit per store instruction, and the calibration JSON's ``store`` field (version 4).

Truth: hand-built dumps with known burst spans (issue and period by hand), a sweep generated from the
spec's equations with a known drain rate per store instruction (test_calibration_synthetic's
generator), and the bench's label format (instrument/bench/burst_gap.cu, label_of).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import CALIB
from test_calibration_synthetic import RATE_GBPS, sweep
from xstage_trace.analysis.calibration_fit import fit_calibration, validate
from xstage_trace.analysis.calibration_model import calibration_document
from xstage_trace.collectors.calibration_io import calibration_name, store_of_document
from xstage_trace.dataset.calibration import load_platform
from xstage_trace.base.probe_layout import RECORD_DTYPE, SLICE_DTYPE
from xstage_trace.instrument.probe_writer import write_probe_dump

EXE = [sys.executable, "-m", "xstage_trace"]
EVENTS = ["burst", "launch", "probe"]  # the bench's event names (kEventNames)
GT0 = 2_000_000_000  # %globaltimer at open; clock64 runs at 1 cycle per ns in these dumps
BURSTS = 24
BULK_RATE_FACTOR = 0.75  # the generated bulk sweep drains at 3/4 of the st.global one
TENSOR2D_RATE_FACTOR = 0.6  # the generated tensor2d sweep at 3/5 of it


def run(*args):
    return subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True, timeout=600)


def write_bench_dump(path, label: str, ctas: int, issue_ns: int, period_ns: int, payload: int) -> None:
    """One slice per producer CTA, BURSTS bursts: BURST begin at b·period, end issue_ns later (payload = B)."""
    cap = 2 * BURSTS + 8
    slices = np.zeros(ctas, SLICE_DTYPE)
    records = np.zeros(ctas * cap, RECORD_DTYPE)
    for c in range(ctas):
        recs = []
        for b in range(BURSTS):
            start = 1000 + b * period_ns + 7 * c  # producers a few ns apart
            recs.append((start | 0 << 48 | 1 << 56, b, 0))
            recs.append((start + issue_ns | 0 << 48 | 2 << 56, b, payload))
        end = 1000 + BURSTS * period_ns + 1000
        slices[c] = (len(recs), 1, c, c, GT0, 0, GT0 + end, end)
        records[c * cap: c * cap + len(recs)] = np.array(recs, RECORD_DTYPE)
    write_probe_dump(path, slice_meta=slices, records=records, capacity=cap, event_names=EVENTS, gpu_name="NVIDIA H200",
                     sm_count=132, sm_clock_khz=1_980_000, label=label)


def bench_label(store: str | None, b: int, gap_ns: int) -> str:
    """burst_gap's label (label_of); ``store`` None: a dump of the bench before --store (no key);
    tensor2d adds the output's row stride (7168 bf16 columns: 14336 bytes)."""
    words = f"dest=host mode=periodic K=2 B={b} G_ns={gap_ns} bursts={BURSTS} threads=256"
    if store is None:
        return words + " store_bytes=16"
    words += f" store={store} store_bytes={16 if store == 'stg' else min(b, 32768)}"
    return words + (" row_stride_bytes=14336" if store == "tensor2d" else "")


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """analyze on three hand-built bench dumps (bulk, stg, and one without a store key): (dumps, run)."""
    d = tmp_path_factory.mktemp("store_dumps")
    write_bench_dump(d / "host_bulk_periodic_K2_B65536_G2000.xsp", bench_label("bulk", 65536, 2000), 2, 1500, 3700, 65536)
    write_bench_dump(d / "host_periodic_K2_B65536_G2000.xsp", bench_label("stg", 65536, 2000), 2, 900, 3100, 65536)
    write_bench_dump(d / "old_periodic_K2_B8192_G2000.xsp", bench_label(None, 8192, 2000), 2, 300, 2400, 8192)
    out = d.parent / "store.run"
    r = run("analyze", d, "-o", out)
    assert r.returncode == 0, r.stderr
    return d, out


def test_analyze_reads_the_store_key_of_the_bench_label(bench_run):
    """Each dump's point carries its label's store instruction (stg where the label names none), and
    its issue and period are the hand-built spans (medians past the 16 warm-up bursts)."""
    pts = pd.read_csv(bench_run[1] / "calibration_points.csv").set_index("dump")
    assert pts.loc["host_bulk_periodic_K2_B65536_G2000.xsp", "store"] == "bulk"
    assert pts.loc["host_periodic_K2_B65536_G2000.xsp", "store"] == "stg"
    assert pts.loc["old_periodic_K2_B8192_G2000.xsp", "store"] == "stg"
    for dump, issue, period in (("host_bulk_periodic_K2_B65536_G2000.xsp", 1500, 3700), ("host_periodic_K2_B65536_G2000.xsp", 900, 3100),
                                ("old_periodic_K2_B8192_G2000.xsp", 300, 2400)):
        row = pts.loc[dump]
        assert (row["tiss_med_ns"], row["period_med_ns"], row["bursts_used"]) == (issue, period, BURSTS - 16)
    assert (pts["dest"] == "host").all() and (pts["V"] == pts["K"] * pts["B"]).all()


def test_bulk_labels_largest_copy_is_a_valid_store_bytes(bench_run):
    """The bulk label's store_bytes is the largest copy (32 KiB here), beyond st.global's 16."""
    from xstage_trace.collectors.collect import collect

    c = collect([bench_run[0]]).tables["dumps"].to_pandas().set_index("dump")
    assert c.loc["host_bulk_periodic_K2_B65536_G2000.xsp", "store_bytes"] == 32768
    assert c.loc["host_periodic_K2_B65536_G2000.xsp", "store_bytes"] == 16
    assert pd.isna(c.loc["old_periodic_K2_B8192_G2000.xsp", "store"])  # the label names none: the table says so


@pytest.fixture(scope="module")
def two_store_sweep():
    """One store path swept twice: st.global at R(K), bulk at 3/4 of it (same floors, capacity, overhead)."""
    stg = sweep().assign(store="stg")
    bulk = sweep(rate_of=lambda k, b: BULK_RATE_FACTOR * RATE_GBPS[k]).assign(store="bulk")
    return pd.concat([stg, bulk], ignore_index=True)


def test_fit_takes_one_store_instruction_and_records_it(two_store_sweep):
    fit = fit_calibration(two_store_sweep, store_path="host", store="bulk")
    assert fit.store == "bulk"
    assert fit.rates.used_by_producers == pytest.approx({k: BULK_RATE_FACTOR * r for k, r in RATE_GBPS.items()}, rel=1e-3)
    other = fit_calibration(two_store_sweep, store_path="host", store="stg")
    assert other.store == "stg" and other.rates.used_by_producers == pytest.approx(RATE_GBPS, rel=1e-3)
    with pytest.raises(ValueError, match="several store instructions"):
        fit_calibration(two_store_sweep, store_path="host")
    # a sweep without the column is st.global
    assert fit_calibration(sweep(), store_path="host").store == "stg"


def test_validation_defaults_to_the_fitted_store(two_store_sweep):
    """With no refit, the bulk fit predicts the bulk points exactly (generated from its own model) and
    the st.global points only when asked for, then off by the rate ratio on drain-limited launches."""
    fit = fit_calibration(two_store_sweep, store_path="host", store="bulk")
    same = validate(fit, two_store_sweep)
    assert len(same.points) == (two_store_sweep["store"] == "bulk").sum() - len(fit.isolated)
    assert same.errors["rec"]["period_err_median_pct"] < 0.1
    cross = validate(fit, two_store_sweep, store="stg")
    drain = cross.errors["rec"]["by_regime"]["drain_limited"]
    # st.global drains 1/0.75 as fast: a bulk model's V/R period is 1/0.75 − 1 = 33 % too long there
    assert drain["period_err_median_pct"] == pytest.approx(100 * (1 / BULK_RATE_FACTOR - 1), rel=0.02)


def test_document_records_the_store_and_names_its_report(two_store_sweep, tmp_path):
    doc = json.loads(json.dumps(calibration_document(fit_calibration(two_store_sweep, store_path="host", store="bulk"), None, "x.csv"), default=float))
    assert doc["calibration_version"] == 5 and doc["store"] == "bulk" and doc["drain"] is None
    assert store_of_document(doc) == "bulk" and calibration_name(doc) == "host_bulk"
    p = tmp_path / "calib.json"
    p.write_text(json.dumps(doc))
    assert load_platform(p).rate([132], [32768])[0] == pytest.approx(BULK_RATE_FACTOR * RATE_GBPS[132], rel=1e-3)


def test_version3_document_reads_as_st_global():
    """The JSONs before version 4 had no store field: their bench issued st.global only."""
    doc = json.loads((CALIB / "calibration_host.json").read_text())
    doc.pop("store", None)
    doc["calibration_version"] = 3
    assert store_of_document(doc) == "stg" and calibration_name(doc) == "host"


def test_calibrate_fit_store_option(two_store_sweep, tmp_path):
    pts = tmp_path / "two.csv"
    two_store_sweep.to_csv(pts, index=False)
    r = run("calibrate", "fit", pts, "--dest", "host")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--store" in r.stderr and "two.csv" in r.stderr
    r = run("calibrate", "fit", pts, "--dest", "host", "--store", "tma")
    assert r.returncode == 2 and "no points of host for --store tma (have bulk, stg)" in r.stderr
    out = tmp_path / "bulk.json"
    r = run("calibrate", "fit", pts, "--dest", "host", "--store", "bulk", "--validate", pts, "--validate-store", "stg", "--json", "-o", out)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["store"] == "bulk" and d["validation"]["store"] == "stg"
    assert d["rate_by_producers_gbps"]["132"] == pytest.approx(BULK_RATE_FACTOR * RATE_GBPS[132], rel=1e-3)
    assert d["validation"]["periodic_points"] == ((two_store_sweep["store"] == "stg") & (two_store_sweep["mode"] == "periodic")).sum()


def test_label_store_key_is_typed():
    """store is one of the bench's three instructions; anything else is a label error naming the key."""
    from xstage_trace.base.config import ConfigError, RunConfig

    assert RunConfig.from_label("store=bulk store_bytes=32768").store == "bulk"
    with pytest.raises(ConfigError, match="store='tma'"):
        RunConfig.from_label("store=tma")


def test_analyze_reads_a_tensor2d_bench_dump(tmp_path):
    """A tensor2d dump's point carries store tensor2d and its hand-built issue and period; the label's
    row_stride_bytes is kept as an extra key and store_bytes is the largest box (32 KiB)."""
    from xstage_trace.collectors.collect import collect

    d = tmp_path / "dumps"
    d.mkdir()
    name = "host_tensor2d_periodic_K2_B65536_G2000.xsp"
    write_bench_dump(d / name, bench_label("tensor2d", 65536, 2000), 2, 1700, 4100, 65536)
    r = run("analyze", d, "-o", tmp_path / "t.run")
    assert r.returncode == 0, r.stderr
    row = pd.read_csv(tmp_path / "t.run" / "calibration_points.csv").set_index("dump").loc[name]
    assert (row["store"], row["tiss_med_ns"], row["period_med_ns"], row["V"]) == ("tensor2d", 1700, 4100, 2 * 65536)
    dumps = collect([d]).tables["dumps"].to_pandas().set_index("dump")
    assert dumps.loc[name, "store_bytes"] == 32768 and "row_stride_bytes=14336" in str(dumps.loc[name, "extra"])


@pytest.fixture(scope="module")
def three_store_sweep(two_store_sweep):
    """The two-store sweep plus tensor2d at 3/5 of the st.global rate."""
    t2d = sweep(rate_of=lambda k, b: TENSOR2D_RATE_FACTOR * RATE_GBPS[k]).assign(store="tensor2d")
    return pd.concat([two_store_sweep, t2d], ignore_index=True)


def test_calibrate_fit_store_tensor2d(three_store_sweep, tmp_path):
    """calibrate fit --store tensor2d fits only the tensor2d points (R = 3/5 of st.global's, as generated),
    records store tensor2d, names itself host_tensor2d, and the written JSON loads as a platform."""
    pts = tmp_path / "three.csv"
    three_store_sweep.to_csv(pts, index=False)
    r = run("calibrate", "fit", pts, "--dest", "host")
    assert r.returncode == 2 and "(bulk, stg, tensor2d)" in r.stderr
    out = tmp_path / "t2d.json"
    r = run("calibrate", "fit", pts, "--dest", "host", "--store", "tensor2d", "--validate", pts, "--validate-store", "bulk", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["store"] == "tensor2d" and calibration_name(doc) == "host_tensor2d" and doc["validation"]["store"] == "bulk"
    assert doc["rate_by_producers_gbps"]["132"] == pytest.approx(TENSOR2D_RATE_FACTOR * RATE_GBPS[132], rel=1e-3)
    assert doc["points"] == (three_store_sweep["store"] == "tensor2d").sum()
    assert load_platform(out).rate([66], [32768])[0] == pytest.approx(TENSOR2D_RATE_FACTOR * RATE_GBPS[66], rel=1e-3)


def test_label_store_tensor2d_is_a_store_instruction():
    from xstage_trace.base.config import RunConfig

    c = RunConfig.from_label("store=tensor2d store_bytes=32768 row_stride_bytes=14336")
    assert (c.store, c.store_bytes, c.extra) == ("tensor2d", 32768, {"row_stride_bytes": "14336"})
