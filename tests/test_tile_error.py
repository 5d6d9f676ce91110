"""Per-tile error breakdown (analysis/tile_error.py, xstage-trace tile-error): the slot-cycle
terms on a hand-built time line (values worked out by hand in the comments), the grouping on a small
tile table with a known answer, and the script on the fused-kernel sample."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import FUSED
from xstage_trace.analysis.tile_error import error_breakdown, error_summary, tail_share, tile_timeline

CFG = {"dest": "host", "shape": "S1", "schedule": "wave", "variant": "v"}
NAN = np.nan


def _spans():
    """Two dumps. 'run', CTA 0 (S = 2 slots; ns):
    p0 L1: wait 0–100, mainloop 100–1100, ls 1200–1500
    p1 L2: wait 1150–1250, mainloop 1250–2250, rs 2300–7300
    p2 L2: wait 2300–2400, mainloop 2400–3400, rs 7400–11400 (behind p1's store)
    p3 L2 (wave 1): wait 5400–7500 (2000 ns late after mainloop end 3400), mainloop 7600–8600, rs 11500–12500
    p4 L2 (wave 1): wait 8700–11500, mainloop 11600–12600, rs 12700–13700
    'run', CTA 1: one L2 tile, mainloop 100–1100, rs 2500–8500 (in flight when p2's store starts).
    'ctrl', CTA 0: three L1 tiles, 150 ns idle between mainloops (the idle floor)."""
    rows = [  # dump, cta, position, wave, l2, wait_start, wait, ml_b, ml_e, ep_b, span
        ("run", 0, 0, 0, False, 0, 100, 100, 1100, 1200, 300),
        ("run", 0, 1, 0, True, 1150, 100, 1250, 2250, 2300, 5000),
        ("run", 0, 2, 0, True, 2300, 100, 2400, 3400, 7400, 4000),
        ("run", 0, 3, 1, True, 5400, 2100, 7600, 8600, 11500, 1000),
        ("run", 0, 4, 1, True, 8700, 2800, 11600, 12600, 12700, 1000),
        ("run", 1, 0, 0, True, 0, 100, 100, 1100, 2500, 6000),
        ("ctrl", 0, 0, 0, False, 0, 100, 100, 1100, 1150, 200),
        ("ctrl", 0, 1, 0, False, 1150, 100, 1250, 2250, 2300, 200),
        ("ctrl", 0, 2, 0, False, 2300, 100, 2400, 3400, 3450, 200),
    ]
    s = pd.DataFrame(rows, columns=["dump", "cta", "position", "wave", "is_l2", "wait_start_ns", "wait_ns", "mainloop_start_ns",
                                    "mainloop_end_ns", "epilogue_start_ns", "epilogue_span_ns"]).astype({c: float for c in (
        "wait_start_ns", "wait_ns", "mainloop_start_ns", "mainloop_end_ns", "epilogue_start_ns", "epilogue_span_ns")})
    s.insert(0, "rank", 0)
    s["mainloop_ns"] = s["mainloop_end_ns"] - s["mainloop_start_ns"]
    s["rs_ns"] = s["epilogue_span_ns"].where(s["is_l2"])
    s["rs_bytes"] = np.where(s["is_l2"], 32768.0, NAN)
    s["cover_ns"] = s.groupby(["dump", "cta"])["mainloop_ns"].shift(-1)
    return s


def _tiles(spans):
    t = spans[["rank", "dump", "cta", "position", "epilogue_span_ns", "cover_ns", "rs_ns"]].rename(columns={"rs_ns": "rs_span_ns"})
    t = t.assign(**CFG, tile_kind=np.where(spans["is_l2"], "linear2", "linear1"), noise_ns=200.0,
                 is_control=spans["dump"].eq("ctrl"))
    t.loc[t["dump"] == "ctrl", "dest"] = "local"
    t["predicted_stall_ns"] = np.maximum(t["epilogue_span_ns"] - t["cover_ns"], 0)
    # measured = the slot wait before tile i+2 less a 100 ns floor: p0 → 0, p1 → 2000, p2 → 2700
    t["measured_stall_ns"] = np.maximum(spans.groupby(["dump", "cta"])["wait_ns"].shift(-2) - 100.0, 0)
    return t


@pytest.fixture(scope="module")
def timeline():
    s = _spans()
    return tile_timeline(s, _tiles(s)).set_index(["dump", "cta", "position"]).sort_index()


def test_slot_cycle_terms_by_hand(timeline):
    p0, p1, p2 = (timeline.loc[("run", 0, k)] for k in range(3))
    # idle before tile i+2 = its mainloop start − the end of mainloop i+1
    assert (p0["mma_idle_ns"], p1["mma_idle_ns"], p2["mma_idle_ns"]) == (150.0, 4200.0, 3000.0)
    assert (p0["pre_wait_ns"], p1["pre_wait_ns"], p2["pre_wait_ns"]) == (50.0, 2000.0, 100.0)
    assert (p0["post_wait_ns"], p1["post_wait_ns"], p2["post_wait_ns"]) == (0.0, 100.0, 100.0)
    assert (p0["epilogue_lead_ns"], p1["epilogue_lead_ns"], p2["epilogue_lead_ns"]) == (-50.0, -100.0, -200.0)
    assert (p0["wake_ns"], p1["wake_ns"], p2["wake_ns"]) == (900.0, 300.0, 200.0)
    assert p1["inner_idle_ns"] == 0.0  # S = 2: nothing between the covering mainloops
    # the control's pre-wait is 50 ns: only p1's wait (2000 ns after its mainloop's end) began late beyond the 200 ns noise
    assert timeline.loc["run", "late_wait"].tolist() == [False, True, False, False, False, False]
    assert np.isnan(timeline.loc[("run", 0, 3), "mma_idle_ns"])  # no tile reuses its slot


def test_identity_idle_equals_span_minus_cover_plus_lead_minus_inner_plus_wake(timeline):
    t = timeline.dropna(subset=["mma_idle_ns"])
    rhs = t["epilogue_span_ns"] - t["cover_ns"] + t["epilogue_lead_ns"] - t["inner_idle_ns"] + t["wake_ns"]
    assert np.allclose(t["mma_idle_ns"], rhs) and np.allclose(t["handoff_ns"], t["epilogue_lead_ns"] - t["inner_idle_ns"] + t["wake_ns"])


def test_idle_floor_from_the_control_and_the_errors(timeline):
    assert (timeline["idle_floor_ns"] == 150.0).all()  # the control CTA idles 150 ns between mainloops
    p0, p1, p2 = (timeline.loc[("run", 0, k)] for k in range(3))
    assert (p1["idle_stall_ns"], p2["idle_stall_ns"]) == (4050.0, 2850.0) and p0["idle_stall_ns"] == 0.0
    assert (p1["error_ns"], p2["error_ns"]) == (2000.0, 300.0)  # predicted 4000, 3000; measured 2000, 2700
    assert (p1["idle_error_ns"], p2["idle_error_ns"]) == (-50.0, 150.0)
    assert (p1["missed_idle_ns"], p2["missed_idle_ns"]) == (2050.0, 150.0)
    # the errors add up: error = idle error + missed idle
    t = timeline.dropna(subset=["error_ns", "idle_error_ns"])
    assert np.allclose(t["error_ns"], t["idle_error_ns"] + t["missed_idle_ns"])


def test_grouping_keys_and_concurrent_stores(timeline):
    run0 = timeline.loc[("run", 0)]
    assert run0["slot_index"].tolist() == [0, 1, 0, 1, 0]
    assert run0["position_in_wave"].tolist() == [0, 1, 2, 0, 1]
    assert run0["burst_in_wave"].tolist() == [-1, 0, 1, 0, 1]  # the Linear-1 tile is in no burst
    # p1's store starts alone (2300); p2's (7400) while CTA 1's (2500–8500) is in flight; CTA 1's while p1's is
    assert run0["concurrent_rs"].tolist()[1:] == [1, 2, 1, 1]
    assert timeline.loc[("run", 1, 0), "concurrent_rs"] == 2
    assert np.isnan(run0["concurrent_rs"].iloc[0])  # a local store is not a remote store
    assert run0["drain_gbps"].iloc[1] == pytest.approx(32768 / 5000) and run0["drain_gbps"].iloc[2] == pytest.approx(2 * 32768 / 4000)


def _table():
    """Six tiles, two kinds; errors (µs): Linear-2 +4, −2, +1, Linear-1 +1, 0, NaN (no measurement)."""
    return pd.DataFrame({
        "tile_kind": ["linear2"] * 3 + ["linear1"] * 3,
        "error_ns": [4000.0, -2000.0, 1000.0, 1000.0, 0.0, NAN],
        "idle_error_ns": [-500.0, -500.0, 1000.0, 0.0, 0.0, NAN],
        "missed_idle_ns": [4500.0, -1500.0, 0.0, 1000.0, 0.0, NAN],
        "predicted_stall_ns": [5000.0, 0.0, 3000.0, 1000.0, 0.0, 0.0],
        "noise_ns": 200.0,
        "handoff_ns": [900.0, 100.0, 700.0, 5.0, 5.0, 5.0],
        "epilogue_lead_ns": [600.0, 0.0, 500.0, 0.0, 0.0, 0.0],
        "wake_ns": [300.0, 100.0, 200.0, 5.0, 5.0, 5.0],
        "drain_gbps": [50.0, 60.0, 70.0, NAN, NAN, NAN],
    })


def test_breakdown_by_kind_known_answer():
    b = error_breakdown(_table(), ["tile_kind"]).set_index("tile_kind")
    l2, l1 = b.loc["linear2"], b.loc["linear1"]
    assert l2["tiles"] == 3 and l1["tiles"] == 2  # the tile without a measurement is left out
    assert l2["mae_us"] == pytest.approx(7 / 3) and l2["bias_us"] == pytest.approx(1.0)
    assert l1["mae_us"] == pytest.approx(0.5) and l1["bias_us"] == pytest.approx(0.5)
    assert l2["error_share"] == pytest.approx(7 / 8) and l1["error_share"] == pytest.approx(1 / 8)
    assert l2["idle_mae_us"] == pytest.approx(2 / 3) and l2["idle_bias_us"] == pytest.approx(0.0)
    assert l2["missed_idle_mean_us"] == pytest.approx(1.0)
    # handoff, lead and wake: medians over the tiles whose predicted stall exceeds the noise (5000 and 3000 ns; and 1000)
    assert l2["handoff_median_us"] == pytest.approx(0.8) and l2["lead_median_us"] == pytest.approx(0.55)
    assert l2["wake_median_us"] == pytest.approx(0.25) and l1["handoff_median_us"] == pytest.approx(0.005)
    assert l2["drain_median_gbps"] == 60.0


def test_tail_share_known_answer():
    errors = pd.Series([100.0] + [1.0] * 19)  # the worst 5 % of 20 tiles is one tile
    assert tail_share(errors) == pytest.approx(100 / 119)
    assert np.isnan(tail_share(pd.Series([0.0, 0.0])))


def test_summary_scores_only_stall_bound_configurations():
    # A: Linear-2 medians 1000 ns predicted / 900 measured (stall); B: 0 / 0 (covered)
    a = pd.DataFrame({**CFG, "tile_kind": "linear2", "rs_span_ns": 1.0, "noise_ns": 200.0,
                      "predicted_stall_ns": [1000.0, 2000.0, 0.0], "measured_stall_ns": [900.0, 1000.0, 0.0],
                      "idle_stall_ns": [1000.0, 2000.0, 0.0], "late_wait": [False, True, False]})
    b = a.assign(shape="S3", predicted_stall_ns=0.0, measured_stall_ns=[0.0, 0.0, 300.0], idle_stall_ns=0.0)
    t = pd.concat([a, b], ignore_index=True)
    t = t.assign(error_ns=t["predicted_stall_ns"] - t["measured_stall_ns"], idle_error_ns=t["predicted_stall_ns"] - t["idle_stall_ns"])
    s = error_summary(t).set_index("configuration")
    assert list(s.index) == ["host S1 wave v", "all"]
    assert s.loc["all", "tiles_wait"] == 3 and s.loc["all", "mae_wait_us"] == pytest.approx(1.1 / 3)
    assert s.loc["all", "mae_idle_us"] == 0.0 and s.loc["all", "spearman_idle"] == pytest.approx(1.0)
    assert s.loc["all", "late_wait_tiles"] == 1 and s.loc["all", "late_wait_error_share"] == pytest.approx(1.0 / 1.1)


@pytest.fixture(scope="module")
def fused_run_dir(tmp_path_factory):
    from xstage_trace.pipeline.runner import analyze_inputs

    out = tmp_path_factory.mktemp("tile_error") / "run"
    analyze_inputs([FUSED / "traced"], out)
    return out


def test_script_on_the_fused_sample(fused_run_dir, tmp_path):
    from xstage_trace.reports.tile_error import run_timeline

    t = run_timeline(fused_run_dir)
    both = t.dropna(subset=["mma_idle_ns", "epilogue_span_ns", "cover_ns", "epilogue_lead_ns", "wake_ns"])
    assert len(both) > 0.9 * t["mma_idle_ns"].notna().sum()
    # the identity holds on the real time line, to the probes' float rounding
    rhs = both["epilogue_span_ns"] - both["cover_ns"] + both["epilogue_lead_ns"] - both["inner_idle_ns"] + both["wake_ns"]
    assert np.allclose(both["mma_idle_ns"], rhs, atol=1e-3)
    # the instrumented wait lies inside the MMA's idle time, up to the skew of two warps leaving the same
    # barrier (the mainloop end is warp 1's clock read, the wait start warp 0's): well under 0.1 µs
    assert (t["pre_wait_ns"].dropna() > -100).all() and (t["post_wait_ns"].dropna() >= 0).all()
    out = tmp_path / "err.md"
    subprocess.run([sys.executable, "-m", "xstage_trace", "tile-error", str(fused_run_dir), "-o", str(out)], check=True)
    text = out.read_text()
    for title in ("## Score", "## Error by tile kind", "## Error by burst in the wave", "largest |error|"):
        assert title in text
    assert "| all |" in text  # the pooled score over the stall-bound configurations


def test_script_bad_input_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "xstage_trace", "tile-error", str(tmp_path / "nope"), "-o", str(tmp_path / "x.md")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "x.md").exists()
