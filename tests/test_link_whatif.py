"""docs/model.md §13: the what-if alternatives against hand calculations from §11's rules on a 2-CTA case."""

import numpy as np

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
