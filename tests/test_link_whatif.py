"""docs/model.md §13: the what-if alternatives against hand calculations from §11's rules on a 2-CTA case."""

import numpy as np
import pytest

from xstage_trace.analysis.forward import LinkModel
from xstage_trace.analysis.link_whatif import launch_whatifs, link_floor_ns, redistributed

# R = 50 B/ns, no capacity, no load latency: a 1000-byte store takes 20 ns on the link; compute 10 ns per tile
MODEL = LinkModel(rate_gbps=50.0, capacity_bytes=0.0, load_latency_ns=0.0)
CTA = np.repeat([0, 1], 3)
POS = np.tile([0, 1, 2], 2)


def test_link_floor_is_total_bytes_over_rate():
    assert link_floor_ns(np.full(6, 1000.0), MODEL) == 6 * 1000 / 50


def test_as_run_two_ctas_by_hand():
    # round n: both compute 10 ns, both stores issued together, the link serves them back to back (40 ns), and both
    # CTAs' next loads wait for the whole round: stores at 10, 60, 110; the last drains at 110 + 40 = 150.
    # Stall of a tile at position >= 1: compute end - load issue - C = (50 + 10) - 10 - 10 = 40.
    t = launch_whatifs(CTA, POS, 1000.0, 10.0, MODEL).set_index("alternative")
    assert t.loc["as_run", "kernel_ns"] == 150.0
    assert t.loc["as_run", "stall_ns"] == 40.0
    assert t.loc["link_floor", "kernel_ns"] == 120.0
    assert t.loc["link_floor", "gain"] == 150.0 / 120.0


def test_one_cta_by_hand():
    # one CTA, six tiles: store at 10, drains at 30; next compute 30..40, store 40 -> 60; ... period 30 ns:
    # last store issued at 10 + 5 * 30 = 160, drained at 180; each later tile waits 20 ns.
    t = launch_whatifs(CTA, POS, 1000.0, 10.0, MODEL, ctas_options=[1]).set_index("alternative")
    assert t.loc["sm_count", "parameter"] == 1
    assert t.loc["sm_count", "kernel_ns"] == 180.0
    assert t.loc["sm_count", "stall_ns"] == 20.0


def test_redistribution_keeps_every_tile_once():
    c, p = redistributed(CTA, POS, 4)
    assert sorted(zip(c.tolist(), p.tolist())) == sorted({(g % 4, g // 4) for g in range(6)})


def test_prefetch_is_never_slower_than_as_run_here():
    t = launch_whatifs(CTA, POS, 1000.0, 10.0, MODEL).set_index("alternative")
    assert t.loc["prefetch", "kernel_ns"] <= t.loc["as_run", "kernel_ns"]
    assert t.loc["prefetch", "kernel_ns"] >= t.loc["link_floor", "kernel_ns"]


def test_sentence_on_deepgemm_names_the_fix_and_its_gain_or_that_none_gains(tmp_path):
    """The DeepGEMM sample, analysed with the path-drain calibration: the stall-bound host row's sentence names the
    prefetch fix with the gain computed here from the what-if's kernel times (numpy), and the link floor, computed
    here as the host tiles' bytes of one launch over R."""
    import pandas as pd

    from xstage_trace import open_run
    from xstage_trace.analysis.link_whatif import run_whatifs
    from xstage_trace.analysis.calibration_model import link_model_of_document
    from xstage_trace.collectors.calibration_io import read_document
    from xstage_trace.pipeline.runner import analyze_inputs
    from xstage_trace.reports.verdict_text import in_display_units, with_fixes, with_sentences

    cal = "sample_traces/h200_calibration/path_drain/calibration_host_tensor2d.json"
    analyze_inputs(["sample_traces/h200_deepgemm/dumps"], tmp_path / "r.xstage-run", calibration=cal)
    run = open_run(tmp_path / "r.xstage-run")
    link = link_model_of_document(read_document(cal), cal)
    tiles = run.tiles()
    w = run_whatifs(tiles, run.dumps(), link)
    s = with_sentences(with_fixes(in_display_units(run.verdicts()), w))
    row = s[(s["dest"] == "host") & (s["shape"] == "m8192n4096k7168")].iloc[0]
    g = w[(w["dest"] == "host") & (w["shape"] == "m8192n4096k7168")].set_index("alternative")
    best = g.loc[["sm_count", "prefetch"], "kernel_ns"].astype(float)
    gain = float(np.float64(g.loc["as_run", "kernel_ns"]) / best.min())
    if gain >= 1.02:  # the faster alternative, named with its gain (2 %: compare's default gate)
        assert f"{gain:.2f}× faster" in row["sentence"]
    else:  # no alternative 2 % faster than the prediction as run: the sentence says so instead of naming a fix
        assert "the model predicts no gain of 2 % or more from fewer CTAs or prefetching" in row["sentence"]
    host = tiles[(tiles["dest"] == "host") & (tiles["shape"] == "m8192n4096k7168")]
    floor_ms = np.median([np.nansum(t["rs_bytes"]) / link.rate_gbps / 1e6 for _, t in host.groupby("dump")])
    assert f"floor (every byte once at R) is {float(f'{floor_ms:.3g}'):g} ms" in row["sentence"]
    assert "prefetch" in row["sentence"]


def test_run_table_matches_its_schema_and_is_empty_without_a_link_model():
    import pandas as pd

    from xstage_trace.analysis.link_whatif import RUN_COLUMNS, run_whatifs
    from xstage_trace.base.schema import RESULTS
    from xstage_trace.pipeline.analyses import RUN_ANALYSES

    assert [f.name for f in RESULTS["link_whatif"]] == RUN_COLUMNS
    assert "link_whatif" in [a.name for a in RUN_ANALYSES]
    tiles = pd.DataFrame({"rank": [0], "dump": ["d"], "cta": [0], "position": [0], "rs_bytes": [1.0], "control_compute_ns": [1.0]})
    assert run_whatifs(tiles, pd.DataFrame({"rank": [0], "dump": ["d"]}), None).empty


def test_plain_stores_wait_for_their_round_by_hand():
    # Eq. 48, two CTAs of one tile each (FLUX's Triton GEMM-RS runs so): both compute 10 ns and issue their 1000-byte
    # plain stores at 10 ns; the link serves them back to back at 50 B/ns, draining at 30 and 50 ns, and each store
    # completes when its round has drained: both wait 50 - 10 = 40 ns. Kernel: the last drain, 50 ns.
    t = launch_whatifs([0, 1], [0, 0], 1000.0, 10.0, MODEL, plain_store=True).set_index("alternative")
    assert t.loc["as_run", "stall_ns"] == 40.0 and t.loc["as_run", "kernel_ns"] == 50.0
    without = launch_whatifs([0, 1], [0, 0], 1000.0, 10.0, MODEL).set_index("alternative")
    assert without.loc["as_run", "stall_ns"] == 0.0  # tensor stores: a CTA's first tile has no load to wait for


def test_a_prefetch_never_computes_two_tiles_of_one_cta_at_once():
    # one CTA, four tiles of 100 ns compute and 1 byte each, λ = 10 ns: the stores drain in 0.02 ns, so nothing waits;
    # loads issued a tile ahead return early, but each tile's compute starts when the previous tile's store is
    # issued, so the kernel is 4 × 100 ns + the last drain (0.02 ns) with or without the prefetch
    m = LinkModel(rate_gbps=50.0, capacity_bytes=0.0, load_latency_ns=10.0)
    t = launch_whatifs([0, 0, 0, 0], [0, 1, 2, 3], 1.0, 100.0, m).set_index("alternative")
    assert t.loc["as_run", "kernel_ns"] == pytest.approx(400.02) and t.loc["prefetch", "kernel_ns"] == pytest.approx(400.02)
    assert t.loc["prefetch", "stall_ns"] == 0.0


def test_prefetch_two_ctas_by_hand():
    # the as-run case above with tile n+1's loads issued at tile n's compute start (Eq. 51): tile 1's loads at 0 see
    # no store and return at once, but its compute waits for tile 0's store issue (10) and ends at 20; tile 2's loads
    # (issued at 10) wait behind round 0 (issued at 10, drained at 50), its compute runs 50..60. The link serves
    # round 0 10..50, round 1 (issued at 20) 50..90, round 2 (issued at 60) 90..130: kernel 130 ns against 150.
    t = launch_whatifs(CTA, POS, 1000.0, 10.0, MODEL).set_index("alternative")
    assert t.loc["prefetch", "kernel_ns"] == 130.0


def test_the_buffer_wait_under_prefetch_by_hand():
    # one CTA, three tiles of 10 ns compute and 1000 bytes (20 ns on the link), Q = 0 (a store is accepted when it
    # has drained), loads one tile ahead (Eq. 51), one staging buffer (cover_tiles = 1: tile i's store must be
    # accepted before tile i+1's compute ends). Tile 0: compute 0..10, store 10, drained and accepted 30; tile 1:
    # loads at 0 see no store, compute 10..20 (after tile 0's store issue), store 20, drained 30..50; tile 2: loads
    # at 10 wait behind store 0 (issued at 10) until 30, compute 30..40: a 10 ns load wait. Buffer waits: tile 0's
    # store accepted at 30, 10 ns after tile 1's compute ended (20); tile 1's at 50, 10 ns after tile 2's (40).
    from xstage_trace.analysis.forward import forward_launch
    from xstage_trace.analysis.link_whatif import prefetch_lag_ns

    c, p = [0, 0, 0], [0, 1, 2]
    f, stall = forward_launch(c, p, 1000.0, 10.0, MODEL, cover_tiles=1, load_lag_ns=prefetch_lag_ns(c, p, 10.0, 0.0, MODEL))
    assert list(f.compute_start_ns) == [0.0, 10.0, 30.0] and list(f.accept_ns) == [30.0, 50.0, 70.0]
    assert list(stall) == [10.0, 10.0, 10.0]
