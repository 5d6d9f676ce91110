"""The calibrated forward prediction inside analyze (docs/model.md §11, analysis.stall.forward_link_stall_ns):
it reads a launch's burst sequence and offered compute only — never a tile's measured store span or mainloop —
and on the shipped DeepGEMM sample it predicts the two plain GEMMs' median stall within the issue's 15 %."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import SAMPLES

DRAIN_CAL = SAMPLES / "h200_calibration" / "path_drain" / "calibration_host_tensor2d.json"


@pytest.fixture(scope="module")
def deepgemm(tmp_path_factory):
    from xstage_trace import open_run
    from xstage_trace.pipeline.runner import analyze_inputs

    out = tmp_path_factory.mktemp("dgf") / "run"
    analyze_inputs([SAMPLES / "h200_deepgemm" / "dumps"], out, calibration=DRAIN_CAL)
    return open_run(out)


def _spans(run):
    """The host tiles of one launch with what the forward step reads (its bytes, steps, stages, cover) rebuilt."""
    from xstage_trace.analysis.calibration_model import link_model_of_document
    from xstage_trace.collectors.calibration_io import read_document

    t = run.tiles()
    launch = t[(t["dest"] == "host") & (t["dump"] == sorted(t.loc[t["dest"] == "host", "dump"].unique())[0])].copy()
    shape = str(launch["shape"].iloc[0])
    b = run.bursts()
    b = b[b["dump"] == launch["dump"].iloc[0]]
    launch["rs_bytes"] = float((b["volume_bytes"] / b["producers"]).median())  # the launch's D tile bytes, from its store rounds
    launch["load_steps"] = int(shape.rsplit("k", 1)[1]) // 128
    launch["load_stages"] = 4
    launch["cover_tiles"] = 1
    return launch, link_model_of_document(read_document(DRAIN_CAL), DRAIN_CAL)


def test_the_prediction_never_reads_the_measured_store_span_or_mainloop(deepgemm):
    from xstage_trace.analysis.stall import forward_link_stall_ns

    t, link = _spans(deepgemm)
    base = forward_link_stall_ns(t, {"host": link})
    assert np.isfinite(base).all() and base.max() > 0
    rng = np.random.default_rng(0)
    noisy = t.assign(rs_span_ns=t["rs_span_ns"] * rng.uniform(0.1, 10, len(t)), mainloop_ns=t["mainloop_ns"] * rng.uniform(0.1, 10, len(t)),
                     measured_stall_ns=0.0, stall_ns=0.0)
    np.testing.assert_array_equal(forward_link_stall_ns(noisy, {"host": link}), base)
    # what it does read: twice the bytes per tile take twice the drain, half of them half
    assert forward_link_stall_ns(t.assign(rs_bytes=2 * t["rs_bytes"]), {"host": link}).mean() > 1.5 * base.mean()
    assert forward_link_stall_ns(t.assign(rs_bytes=0.5 * t["rs_bytes"]), {"host": link}).mean() < 0.75 * base.mean()


def test_plain_gemms_median_stall_within_15_percent_of_the_measured(deepgemm):
    t3 = deepgemm.table3().set_index(["dest", "shape"])
    for shape in ("m8192n4096k7168", "m8192n7168k2048"):  # docs/calibration-physics.md: the grouped GEMM misses by +19 %
        row = t3.loc[("host", shape)]
        assert row["forward_stall_ns"] == pytest.approx(row["stall_ns"], rel=0.15), shape
    assert t3.loc[("local", "m8192n4096k7168"), "forward_stall_ns"] != t3.loc[("local", "m8192n4096k7168"), "forward_stall_ns"]  # NaN: not calibrated


def test_plain_stores_of_one_round_complete_when_the_round_has_drained_by_hand():
    """docs/model.md Eq. 48 on three CTAs with one tile each (one round): every store is issued at C + E and the
    round's 3·B bytes drain at R from there, and each tile waits for the whole round, 3·B/R, not for its FIFO place."""
    import pandas as pd

    from xstage_trace.analysis.forward import LinkModel
    from xstage_trace.analysis.stall import forward_link_stall_ns

    rate_gbps, b, c, e = 50.0, 100_000.0, 10_000.0, 500.0  # bytes/ns, bytes, ns, ns
    t = pd.DataFrame({"rank": 0, "dump": "d", "dest": "host", "cta": [0, 1, 2], "position": 0, "mainloop_ns": 1.0,
                      "control_compute_ns": c, "control_epilogue_ns": e, "rs_bytes": b, "load_steps": 1, "load_stages": 1,
                      "cover_tiles": 0, "plain_store": True})
    link = LinkModel(rate_gbps=rate_gbps, capacity_bytes=1e9)  # a capacity that accepts everything: only Eq. 48 can wait
    np.testing.assert_allclose(forward_link_stall_ns(t, {"host": link}), 3 * b / rate_gbps)
    assert (forward_link_stall_ns(t.assign(plain_store=False), {"host": link}) == 0).all()


def test_analyze_predicts_each_launch_as_it_would_alone(deepgemm):
    """analyze predicts every batch's launches in one call (pipeline.stream._pass2_linked); each launch's
    forward_stall_ns must be what §11 gives that launch predicted by itself from the tiles table's inputs."""
    from xstage_trace.analysis.calibration_model import link_model_of_document
    from xstage_trace.analysis.stall import forward_link_stall_ns
    from xstage_trace.collectors.calibration_io import read_document

    link = link_model_of_document(read_document(DRAIN_CAL), DRAIN_CAL)
    t = deepgemm.tiles()
    host = t[t["dest"] == "host"]
    assert host["dump"].nunique() >= 6 and host["forward_stall_ns"].notna().all()
    for dump, launch in host.groupby("dump", observed=True):
        alone = forward_link_stall_ns(launch.assign(operands="global"), {"host": link})
        assert np.isfinite(alone).all(), dump
        np.testing.assert_array_equal(launch["forward_stall_ns"].to_numpy(), alone, err_msg=str(dump))
