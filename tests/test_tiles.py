"""Reference fused kernel on the H200: bursts, per-tile stall prediction vs measurement, Table 3."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from conftest import FUSED, SAMPLES
from xstage_trace.analysis.stall import stall_summary
from xstage_trace.pipeline.runner import analyze_inputs
from xstage_trace.base.run_files import read_run


@pytest.fixture(scope="module")
def fused_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fused") / "run"
    summary = analyze_inputs([FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"], out, warmup_launches=2)
    tables, _ = read_run(out)
    return summary, tables["tiles"].to_pandas(), tables["bursts"].to_pandas()


def _cfg(tiles, shape, schedule, dest="host"):
    return tiles[(tiles["dest"] == dest) & (tiles["shape"] == shape) & (tiles["schedule"] == schedule)]


def test_alignment_and_counts(fused_run):
    summary, tiles, bursts = fused_run
    a = summary["alignment"]["rank0"]
    assert a["dumps_matched"] == a["dumps_total"] == 8 and a["residual_ns"] == 0.0
    assert summary["tiles"] == 8 * 7392 and summary["backpressured_tiles"] > 0
    assert len(bursts) > 0 and (bursts["volume_bytes"] > 0).all()


def test_wave_schedule_backpressures_where_the_model_says(fused_run):
    """Where the model says (by hand, from the calibration file and the kernel's geometry, not from the
    analysis): an aligned wave of Linear-2 stores drains in V/R = 132 CTAs × the tile's bytes / R(132, B);
    the wave stalls iff that exceeds the Linear-2 mainloop that covers it (docs/model.md §2 Eq. 4 with
    G = T_L2, §5 Eq. 19). S1 and S2 must stall, the S3 control must not; the tiles must agree."""
    _, tiles, _ = fused_run
    cal = json.loads((SAMPLES / "h200_calibration" / "calibration_host.json").read_text())
    for shape in ("S1", "S2", "S3"):
        l2 = _cfg(tiles, shape, "wave")
        l2 = l2[l2["tile_kind"] == "linear2"]
        tile_bytes = 128 * 128 * 2  # fused_moe.cu: a 128 × 128 bf16 output tile (TILE_OUT_BYTES)
        rate = cal["rate_by_configuration_gbps"][f"132,{tile_bytes}"]
        drain_ns = 132 * tile_bytes / rate
        floor_ns = cal["issue_floor_ns"][f"132,{tile_bytes}"]
        model_stall_ns = drain_ns - floor_ns - l2["mainloop_ns"].median()  # [V/R − T_iss^0 − G]₊ before the clamp
        noise = l2["noise_ns"].iloc[0]
        if shape == "S3":
            assert model_stall_ns < 0 and l2["backpressured"].mean() == 0
            continue
        assert model_stall_ns > 10 * noise
        assert l2["backpressured"].mean() > 0.6
        assert l2["rs_span_ns"].median() > 0.5 * drain_ns  # the spans are drain-limited, as the model says
        assert l2["measured_stall_ns"].median() > noise and l2["predicted_stall_ns"].median() > noise


def test_interleaving_recovers_the_spans(fused_run):
    _, tiles, _ = fused_run
    for shape in ("S1", "S2"):
        wave, inter = _cfg(tiles, shape, "wave"), _cfg(tiles, shape, "interleaved")
        s_w = wave[wave["tile_kind"] == "linear2"]["rs_span_ns"].median()
        s_i = inter[inter["tile_kind"] == "linear2"]["rs_span_ns"].median()
        cover_i = inter[inter["tile_kind"] == "linear1"]["mainloop_ns"].median()  # what covers an L2 store when interleaved
        # the wave's aligned bursts stretch the span past its cover; interleaved, it stays under it (docs/model.md §6)
        assert 40_000 < s_w and s_i < 0.3 * s_w and s_i < cover_i
        assert inter["measured_stall_ns"].median() < inter["noise_ns"].iloc[0]
        assert inter["backpressured"].mean() < 0.2 * wave["backpressured"].mean()  # most of the wave's backpressure is gone


def test_negative_controls_show_neither(fused_run):
    _, tiles, _ = fused_run
    for sched in ("wave", "interleaved"):
        for t in (_cfg(tiles, "S3", sched), _cfg(tiles, "S1", sched, dest="local")):
            assert len(t) == 7392
            assert t["predicted_stall_ns"].max() == 0.0
            assert t["backpressured"].sum() == 0


def test_prediction_tracks_measurement_tile_by_tile(fused_run):
    """Issue acceptance: over all tiles of the backpressured configurations, Spearman ≥ 0.9 and
    median absolute error ≤ 0.5 µs (measured on this GPU; see README for the numbers)."""
    _, tiles, _ = fused_run
    bp = tiles[(tiles["dest"] == "host") & tiles["shape"].isin(["S1", "S2"]) & (tiles["schedule"] == "wave")].dropna(subset=["measured_stall_ns"])
    rho = spearmanr(bp["predicted_stall_ns"], bp["measured_stall_ns"]).correlation
    mae = np.median(np.abs(bp["predicted_stall_ns"] - bp["measured_stall_ns"]))
    assert rho >= 0.9 and mae <= 500.0
    l2 = bp[bp["tile_kind"] == "linear2"]
    assert spearmanr(l2["predicted_stall_ns"], l2["measured_stall_ns"]).correlation >= 0.9
    assert np.median(np.abs(l2["predicted_stall_ns"] - l2["measured_stall_ns"])) <= 500.0


def test_table3_summary(fused_run):
    _, tiles, _ = fused_run
    cfg = tiles[["dest", "shape", "schedule"]].agg("-".join, axis=1)
    s = stall_summary(tiles[tiles["tile_kind"] == "linear2"].assign(cfg=cfg), ["cfg"])
    assert set(s["cfg"]) >= {"host-S1-wave", "host-S1-interleaved", "host-S3-wave", "local-S1-wave"}
    s1 = s.set_index("cfg").loc["host-S1-wave"]
    assert s1["predicted_stall_med_ns"] == pytest.approx(s1["measured_stall_med_ns"], rel=0.1)


def test_table3_carries_kernel_times_from_nsys(fused_run):
    summary, _, _ = fused_run
    t3 = {(r["dest"], r["shape"], r["schedule"]): r for r in summary["table3"]}
    wave, inter = t3[("host", "S1", "wave")], t3[("host", "S1", "interleaved")]
    assert wave["trials"] == 5 and inter["trials"] == 5  # 7 launches each: 2 warm-ups + 5 trials
    assert wave["kernel_ns"] > 1.4 * inter["kernel_ns"]
    assert abs(t3[("host", "S3", "wave")]["kernel_ns"] / t3[("host", "S3", "interleaved")]["kernel_ns"] - 1) < 0.02


def test_model_stall_over_the_tile_table(fused_run, tmp_path):
    from xstage_trace.pipeline.model_eval import stall_doc

    _, tiles, _ = fused_run
    path = tmp_path / "tiles.parquet"
    tiles.to_parquet(path)
    d = stall_doc(None, None, path, "dest,shape,schedule,tile_kind")
    assert d["tiles"] == len(tiles) and len(d["predicted_stall_us"]) == len(tiles)
    assert len(d["summary"]) == 16  # 8 configurations × 2 tile kinds


def test_stg_epilogue_stalls_show_as_mainloop_inflation(tmp_path):
    """The st.global epilogue variants (README finding): their stalled PCIe stores slow the mainloop while
    the slot wait stays at its floor, so the slot model sees nothing; the diagnosis must not say 'none'."""
    import xstage_trace

    analyze_inputs([FUSED / "traced", FUSED / "variants"], tmp_path / "run")
    run = xstage_trace.open_run(tmp_path / "run")
    t3 = run.table3().set_index(["dest", "shape", "variant", "schedule"])
    noise_ns = float(run.tiles()["noise_ns"].iloc[0])
    stg = t3.loc[("host", "S1", "split/smem/stg", "wave")]
    # the slot wait at its floor: the median measured slot stall is below the noise the run derives
    assert stg["slot_meas_ns"] < noise_ns and stg["inflated_tiles"] > 0.25 * stg["tiles"]
    assert stg["compute_ns"] > t3.loc[("local", "S1", "split/smem/tma", "wave"), "compute_ns"]
    # ... and the measured stall counts the inflated mainloops: the verdict is stall-bound by mainloop inflation
    v = run.verdicts().set_index(["dest", "shape", "variant", "schedule"]).loc[("host", "S1", "split/smem/stg", "wave")]
    assert v["verdict"] == "stall-bound" and v["diagnosis"] == "mainloop_inflation"
    for cfg in [("host", "S1", "split/smem/tma"), ("local", "S1", "split/smem/tma"), ("host", "S3", "split/smem/tma")]:
        # the bulk-copy epilogue leaves the mainloops alone: a few stray tiles at most, never a cause
        for sched in ("wave", "interleaved"):
            assert t3.loc[(*cfg, sched), "inflated_tiles"] < 0.05 * t3.loc[(*cfg, sched), "tiles"]


def test_control_p99_and_median_equal_pandas_group_by_with_missing_keys_and_values():
    """The control statistics' mainloop p99 and median and store-span median per (shape, kind, operands) are
    pandas' group-by quantile (linear interpolation) and median (missing keys a group of their own, missing
    values skipped), exactly."""
    import numpy as np
    import pandas as pd

    from xstage_trace.analysis.tiles import CONTROL_KEYS, control_stats

    rng = np.random.default_rng(7)
    n = 5000
    t = pd.DataFrame({
        "shape": rng.choice(["S1", "S2", None], n), "tile_kind": rng.choice(["linear1", "linear2"], n),
        "operands": rng.choice(["smem", "global", None], n), "is_control": rng.random(n) < 0.7,
        "mainloop_ns": np.where(rng.random(n) < 0.1, np.nan, rng.gamma(2.0, 1e4, n)), "slot_wait_ns": rng.random(n),
        "rs_ns": np.where(rng.random(n) < 0.3, np.nan, rng.gamma(2.0, 1e3, n)),
    })
    g, store = (t[t["is_control"]].groupby(CONTROL_KEYS, dropna=False)[c] for c in ("mainloop_ns", "rs_ns"))
    want = (pd.concat([g.quantile(0.99).rename("ctrl"), g.median().rename("ctrl_median"), store.median().rename("ctrl_store_median"),
                      store.quantile(0.99).rename("ctrl_store_p99")], axis=1).reset_index()
            .astype({k: "str" for k in CONTROL_KEYS}).sort_values(CONTROL_KEYS).reset_index(drop=True))
    for frame in (t, t.astype({k: "category" for k in CONTROL_KEYS})):
        got = control_stats(frame).mainloop_p99.sort_values(CONTROL_KEYS).reset_index(drop=True)
        assert len(got) == len(want) == 3 * 2 * 3  # shapes (one missing) × kinds × operands (one missing)
        pd.testing.assert_frame_equal(got, want, check_exact=True, check_dtype=False)


def test_control_statistics_from_samples_of_disjoint_tiles_equal_those_of_all_whatever_the_cap():
    """``analyze`` takes the control statistics from per-batch samples read back in the main process, at
    most a cap of values held at once: they equal (exactly) the statistics of one table of all the tiles,
    whose floor and noise are the median and the p99 of the floor-corrected slot waits (docs/model.md §5) and whose
    mainloop p99 is pandas' group-by quantile, computed here by numpy and pandas on the whole table."""
    import numpy as np
    import pandas as pd

    from xstage_trace.analysis.tiles import CONTROL_KEYS, MIN_NOISE_NS, control_sample, control_stats_from_samples

    rng = np.random.default_rng(11)
    n = 6000
    t = pd.DataFrame({
        "shape": rng.choice(["S1", "S2", None], n), "tile_kind": rng.choice(["linear1", "linear2"], n),
        "operands": rng.choice(["smem", None], n), "is_control": rng.random(n) < 0.6,
        "mainloop_ns": np.where(rng.random(n) < 0.1, np.nan, rng.gamma(2.0, 1e4, n)),
        "slot_wait_ns": np.where(rng.random(n) < 0.2, np.nan, np.round(rng.gamma(1.5, 400.0, n), 1)),  # ties
        "rs_ns": np.where(rng.random(n) < 0.3, np.nan, np.round(rng.gamma(2.0, 1e3, n), 1)),
    })
    ctrl = t[t["is_control"]]
    waits = ctrl["slot_wait_ns"].dropna().to_numpy()
    g, store = (ctrl.groupby(CONTROL_KEYS, dropna=False)[c] for c in ("mainloop_ns", "rs_ns"))
    want_p99 = (pd.concat([g.quantile(0.99).rename("ctrl"), g.median().rename("ctrl_median"), store.median().rename("ctrl_store_median"),
                           store.quantile(0.99).rename("ctrl_store_p99")], axis=1).reset_index()
                .astype({k: "str" for k in CONTROL_KEYS}).sort_values(CONTROL_KEYS).reset_index(drop=True))
    cuts = [0, 1000, 1001, 4500, n]  # one part of a single tile; parts holding different groups
    parts = [t.iloc[a:b].astype({"shape": "category"}) if i % 2 else t.iloc[a:b] for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]
    for cap in (10 ** 9, 500, 7, 1):  # all held; held per group but not the waits; narrowed down to single keys
        got = control_stats_from_samples(lambda: (control_sample(p) for p in parts), cap)
        assert got.floor_ns == np.median(waits), cap
        assert got.noise_ns == max(np.percentile(waits - np.median(waits), 99), MIN_NOISE_NS), cap
        pd.testing.assert_frame_equal(got.mainloop_p99.sort_values(CONTROL_KEYS).reset_index(drop=True), want_p99, check_exact=True, check_dtype=False)
    assert control_stats_from_samples(lambda: (), 5).floor_ns == 0.0  # no control: the defaults
