"""Every dashboard page under Streamlit's AppTest over runs made from the shipped captures: no
exception, the key numbers shown equal what the run's tables say (computed here independently),
widgets change what is shown, and runs lacking probes / nsys / calibration say what is missing."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import xstage_trace
from conftest import ROOT

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

APP = str(ROOT / "src" / "xstage_trace" / "app" / "main.py")
PAGES = ["overview", "timeline", "tiles", "bursts", "calibration", "whatif", "compare"]


def _app(runs, page: str = "overview") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["run_paths"] = [str(r) for r in runs]
    at.run()
    if page != "overview":
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def _text(at) -> str:
    parts = [e.value for kind in ("warning", "info", "error", "caption", "markdown", "success") for e in getattr(at, kind)]
    return "\n".join(str(p) for p in parts)


def _s1(tiles, schedule: str):
    return (tiles["dest"] == "host") & (tiles["shape"] == "S1") & (tiles["schedule"] == schedule) & (tiles["tile_kind"] == "linear2")


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_on_the_fused_capture(fused_run_dir, page):
    at = _app([fused_run_dir], page)
    assert at.title and at.title[0].value  # a heading, no exception (checked in _app)


def test_overview_leads_with_the_verdicts_and_their_measured_stall(fused_run_dir):
    tiles = xstage_trace.open_run(fused_run_dir).tiles()
    at = _app([fused_run_dir])
    assert _metric(at, "backpressured tiles") == f"{int(tiles['backpressured'].sum()):,}"
    v = next(d.value for d in at.dataframe if "cause" in d.value.columns).set_index(["dest", "shape", "schedule"])
    # S1 wave: the median measured stall of its remote-store tiles, far above the 200 ns noise floor, in the slot
    med = tiles.loc[_s1(tiles, "wave") & tiles["rs_span_ns"].notna(), "stall_ns"].median()
    assert med > tiles["noise_ns"].max()
    assert v.loc[("host", "S1", "wave"), "stall measured (µs)"] == pytest.approx(med / 1e3, abs=1e-3)
    assert v.loc[("host", "S1", "wave"), ["verdict", "cause"]].tolist() == ["stall-bound", "slot_backpressure"]
    assert v.loc[("host", "S1", "interleaved"), "verdict"] == "covered"
    assert v.loc[("local", "S1", "wave"), "verdict"] == "covered"  # the local-HBM control
    boxes = [e.value for e in at.error]  # each stall-bound configuration in its own red box, before the tables
    assert any(b.startswith("**host S1 split/smem/tma wave**: stall-bound by slot backpressure") for b in boxes)


def test_tiles_page_numbers_follow_the_configuration_picked(fused_run_dir):
    tiles = xstage_trace.open_run(fused_run_dir).tiles()
    at = _app([fused_run_dir], "tiles")
    wave = tiles[_s1(tiles, "wave")]
    assert _metric(at, "backpressured") == f"{int(wave['backpressured'].sum()):,}"
    both = wave.dropna(subset=["predicted_stall_ns", "measured_stall_ns"])
    rho = stats.spearmanr(both["predicted_stall_ns"], both["measured_stall_ns"]).statistic
    assert _metric(at, "Spearman ρ (pred, meas)") == f"{rho:.3f}"
    at.multiselect(key="tiles_configs").set_value(["host S1 interleaved"]).run()
    assert _metric(at, "backpressured") == f"{int(tiles.loc[_s1(tiles, 'interleaved'), 'backpressured'].sum()):,}"


def test_timeline_aggregates_a_whole_kernel_and_draws_spans_in_a_narrow_window(fused_run_dir):
    run = xstage_trace.open_run(fused_run_dir)
    tiles, probes = run.tiles(), run.probes()
    busiest = tiles.groupby("dump")["backpressured"].sum().idxmax()
    at = _app([fused_run_dir], "timeline")
    assert at.selectbox(key="timeline_dump").value == busiest
    p = probes[(probes["dump"] == busiest) & (probes["kind"] == "begin")]
    begins = int(p["event"].isin(["mainloop", "slot_wait", "rs", "ls", "burst"]).sum())  # one span per begin record
    assert _metric(at, "spans in window") == f"{begins:,}"
    assert _metric(at, "drawn as") == "heat map"
    at.slider(key="timeline_window").set_value((1000.0, 1020.0)).run()
    n = int(_metric(at, "spans in window").replace(",", ""))
    assert 0 < n <= 4000
    assert _metric(at, "drawn as") == "spans"


def test_a_tile_picked_on_the_tiles_page_opens_on_the_timeline(fused_run_dir):
    at = _app([fused_run_dir], "tiles")
    at.button(key="tiles_show").click().run()
    dump, cta, tile = at.session_state["selected_tile"]
    assert not at.exception
    assert at.title[0].value.startswith("Timeline")
    assert at.selectbox(key="timeline_dump").value == dump
    assert f"CTA {cta}, tile {tile}" in _text(at)
    assert _metric(at, "drawn as") == "spans"  # the window closed in on the tile


def test_bursts_page_marks_the_first_failing_guard(fused_run_dir):
    run = xstage_trace.open_run(fused_run_dir)
    bursts, tiles = run.bursts(), run.tiles()
    busiest = tiles.groupby("dump")["backpressured"].sum().idxmax()
    at = _app([fused_run_dir], "bursts")
    mine = bursts[bursts["dump"] == busiest].sort_values("burst")
    assert _metric(at, "bursts") == f"{len(mine):,}"
    fails = mine[mine["guard_ok"] == False]  # noqa: E712
    assert _metric(at, "guard onset (burst)") == (str(int(fails["burst"].iloc[0])) if len(fails) else "none")
    other = next(d for d in sorted(bursts["dump"].unique()) if "_S3_interleaved_" in d)
    at.selectbox(key="bursts_dump").set_value(other).run()
    assert _metric(at, "bursts") == f"{int((bursts['dump'] == other).sum()):,}"


def test_calibration_page_shows_the_runs_model_and_fits_a_calibration_run(fused_run_dir, calibration_run_dir):
    doc = xstage_trace.open_run(fused_run_dir).calibration_document()
    at = _app([fused_run_dir], "calibration")
    assert _metric(at, "R (GB/s)") == f"{doc['rate_gbps']:.1f} ± {doc['rate_uncertainty_gbps']:.1f}"
    assert "sha256 verified" in _text(at)
    at = _app([calibration_run_dir], "calibration")
    assert at.selectbox(key="cal_dest").options == ["host", "local"]
    host_r = _metric(at, "R (GB/s)")
    at.selectbox(key="cal_dest").set_value("local").run()
    assert "lower bound" in _metric(at, "R (GB/s)") and host_r != _metric(at, "R (GB/s)")  # local HBM never drain-limited


def test_whatif_starts_from_the_runs_measured_span_and_reproduces_its_stall(fused_run_dir):
    tiles = xstage_trace.open_run(fused_run_dir).tiles()
    at = _app([fused_run_dir], "whatif")
    l2 = tiles[_s1(tiles, "wave")].dropna(subset=["rs_span_ns"])
    span, lead = l2["rs_span_ns"].median() / 1e3, l2["epilogue_lead_ns"].median() / 1e3
    assert at.session_state["whatif_span"] == "measured"
    assert at.session_state["whatif_l2"] == pytest.approx(tiles[_s1(tiles, "wave") | _s1(tiles, "interleaved")]["mainloop_ns"].median() / 1e3, abs=0.01)
    stall = max(lead + span - at.session_state["whatif_l2"], 0)  # docs/model.md §5 with the run's own span
    assert _metric(at, "expert-wave: predicted stall (µs)") == f"{stall:.2f}"
    measured = l2["stall_ns"].median() / 1e3
    assert abs(stall - measured) <= 0.1 * measured  # the page says it reproduces the run: it does
    assert "reproduces the measured stall" in _text(at)


def test_whatif_eq1_matches_the_burst_gap_law_by_hand_and_follows_the_sliders(fused_run_dir):
    tiles = xstage_trace.open_run(fused_run_dir).tiles()
    at = _app([fused_run_dir], "whatif")
    at.radio(key="whatif_span").set_value("eq1")
    at.button[0].click().run()  # the form's Evaluate button
    v = {k: at.session_state[k] for k in ("whatif_l2", "whatif_l1", "whatif_b", "whatif_k", "whatif_r", "whatif_t0", "whatif_n1", "whatif_n2")}
    lead = tiles[_s1(tiles, "wave")].dropna(subset=["rs_span_ns"])["epilogue_lead_ns"].median() / 1e3
    lead_i = tiles[_s1(tiles, "interleaved")].dropna(subset=["rs_span_ns"])["epilogue_lead_ns"].median() / 1e3
    vol = v["whatif_k"] * v["whatif_b"] * 1024
    drain_us = vol / v["whatif_r"] / 1e3
    span_wave = max(v["whatif_t0"], drain_us - v["whatif_l2"])  # Eq. 1 at the wave gap G = T_L2
    g_int = v["whatif_l2"] + v["whatif_n1"] / v["whatif_n2"] * v["whatif_l1"]  # docs/model.md §6
    span_int = max(v["whatif_t0"], drain_us - g_int)
    assert _metric(at, "expert-wave: predicted stall (µs)") == f"{max(lead + span_wave - v['whatif_l2'], 0):.2f}"
    assert _metric(at, "interleaved: predicted stall (µs)") == f"{max(lead_i + span_int - v['whatif_l1'], 0):.2f}"
    assert _metric(at, "expert-wave: verdict") == "stall"
    at.slider(key="whatif_l2").set_value(100.0)
    at.button[0].click().run()
    assert drain_us - 100.0 < v["whatif_t0"] + 100.0 - lead  # by hand: span = T0, and lead + T0 < cover
    assert _metric(at, "expert-wave: predicted stall (µs)") == "0.00"
    assert _metric(at, "expert-wave: verdict") == "no stall"


def test_compare_two_runs_of_the_same_dumps_shows_no_change(fused_run_dir, partial_runs):
    at = _app([fused_run_dir, partial_runs["no_calibration"]], "compare")
    assert "PASS" in "\n".join(e.value for e in at.success)  # the gate's decision leads
    assert _metric(at, "kernel time B vs A (median over configurations)") == "+0.0 %"
    assert _metric(at, "configurations whose verdict changed") == "0"
    g = next(x.value for x in at.dataframe if "Δ kernel (%)" in x.value.columns)
    assert np.allclose(g["Δ kernel (%)"], 0.0) and len(g) == 8  # 4 configurations × 2 schedules, matched on the gate's keys
    sp = next(x.value for x in at.dataframe if "speedup" in x.value.columns).set_index(["dest", "shape"])
    t3 = xstage_trace.open_run(fused_run_dir).table3()
    k = t3.pivot(index=["dest", "shape"], columns="schedule", values="kernel_ns")  # by hand: wave / interleaved kernel time
    np.testing.assert_allclose(sp.loc[k.index, "speedup"], (k["wave"] / k["interleaved"]).to_numpy())
    one = _app([fused_run_dir], "compare")
    assert "Only one run is open" in _text(one)


def test_compare_of_runs_with_no_configuration_in_common_says_so(split_runs):
    wave, interleaved = split_runs  # one schedule each: nothing to match on dest, shape, schedule
    at = _app([wave, interleaved], "compare")
    assert "no configuration in common" in _text(at) and not any(m.label == "configurations whose verdict changed" for m in at.metric)


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("kind", ["no_probes", "no_nsys", "no_calibration"])
def test_pages_say_what_is_missing_instead_of_failing(partial_runs, kind, page):
    at = _app([partial_runs[kind]], page)
    assert at.title


@pytest.mark.parametrize(("kind", "page", "phrase"), [
    ("no_probes", "overview", "No probe records"),
    ("no_probes", "tiles", "No tiles in this run"),
    ("no_probes", "bursts", "No remote-store bursts"),
    ("no_probes", "timeline", "No probe records"),
    ("no_nsys", "overview", "No Nsight Systems export"),
    ("no_nsys", "timeline", "No nsys export"),
    ("no_calibration", "overview", "No calibration"),
    ("no_calibration", "bursts", "No calibration with this run"),
    ("no_calibration", "calibration", "No calibration"),
    ("no_calibration", "whatif", "no calibration: analyze with --calibration"),
])
def test_missing_inputs_are_named(partial_runs, kind, page, phrase):
    assert phrase in _text(_app([partial_runs[kind]], page))


def test_without_a_run_the_dashboard_says_how_to_give_one():
    assert "xstage-trace dashboard RUN" in _text(_app([]))
