"""Clock alignment (collectors/align.py) on hand-built dumps and kernels whose answer is known by
construction: offsets, drift, the residual of an impossible layout, the kernel each dump belongs to
(docs/mutation.md: written against planted bugs that the sample-based tests did not catch)."""

from __future__ import annotations

import numpy as np
import pytest

from xstage_trace.collectors.align import MATCH_SLACK_NS, align_dumps

KERNEL_NS = 100_000.0
STEP_NS = 1_000_000.0


def _kernels(n: int) -> tuple[np.ndarray, np.ndarray]:
    ks = STEP_NS * np.arange(n)
    return ks, ks + KERNEL_NS


def test_a_constant_offset_is_found_exactly_and_each_dump_gets_its_kernel():
    """Dumps 20 µs inside each end of their kernel, shifted by 3 ms on the probe clock: every dump's
    feasible offsets are [3 ms − 20 µs, 3 ms + 20 µs], the deepest line is 3 ms flat, margin 20 µs."""
    ks, ke = _kernels(4)
    off = 3e6
    a, b = ks + 20_000 + off, ke - 20_000 + off
    perm = np.array([2, 0, 3, 1])  # kernels given out of order: the result indexes the kernels as given
    al = align_dumps(a, b, ks[perm], ke[perm])
    assert al.offset_ns == pytest.approx(off, abs=1e-3) and al.drift == pytest.approx(0.0, abs=1e-12)
    assert al.residual_ns == 0.0 and al.dumps_matched == al.dumps_total == 4
    assert perm[al.kernel_of_dump].tolist() == [0, 1, 2, 3]
    # feasible slopes: through (t0, −20 µs) and (t3, +20 µs) relative to the offset, ± 40 µs / 3 ms
    lo, hi = al.drift_range
    assert lo == pytest.approx(-40_000 / (3 * STEP_NS), rel=1e-6) and hi == pytest.approx(40_000 / (3 * STEP_NS), rel=1e-6)
    assert al.t_ref_ns == pytest.approx((a[0] + b[0]) / 2)
    assert al.to_kernel_clock(np.array([a[1]]))[0] == pytest.approx(ks[1] + 20_000, abs=1e-3)


def test_a_negative_offset_and_a_drift_are_recovered():
    """Probe clock = kernel clock − 5 ms + 50 ppm × (t − t_first): the fitted line is that one (every
    dump has the same ±20 µs room around it, so the deepest line is the true one)."""
    ks, ke = _kernels(5)
    drift = 50e-6
    mid = (ks + ke) / 2
    t_probe_mid = mid - 5e6 + drift * (mid - mid[0])
    a, b = t_probe_mid - (KERNEL_NS / 2 - 20_000), t_probe_mid + (KERNEL_NS / 2 - 20_000)
    al = align_dumps(a, b, ks, ke)
    assert al.residual_ns == 0.0 and al.dumps_matched == 5
    # the slope is per probe-clock ns: probe time advances (1 + drift) per kernel ns, so drift / (1 + drift)
    assert al.drift == pytest.approx(drift / (1 + drift), rel=1e-9)
    assert al.offset_ns == pytest.approx(-5e6, abs=1.0)
    np.testing.assert_allclose(al.to_kernel_clock(t_probe_mid), mid, atol=1.0)
    assert not al.drift_identified  # ±20 µs over 4 ms leaves ±5 ppm, wider than 1 ppm
    d = al.as_dict()
    assert d["drift_ppm"] is None and d["drift_range_ppm"][0] < 50 < d["drift_range_ppm"][1]


def test_a_drift_pinned_to_a_ppm_is_identified():
    """Dumps that nearly fill their kernels (±1 µs of room) over 4 s: slopes within ±2 µs / 4 s = ±0.5 ppm,
    identified (≤ 1 ppm); over 100 ms the same room leaves ±20 ppm, not identified."""
    n = 5
    wide = 25e6 * np.arange(n)
    assert align_dumps(wide + 1_000, wide + KERNEL_NS - 1_000, wide, wide + KERNEL_NS).drift_range == pytest.approx((-2e-5, 2e-5), rel=1e-6)
    assert not align_dumps(wide + 1_000, wide + KERNEL_NS - 1_000, wide, wide + KERNEL_NS).drift_identified
    ks = 1e9 * np.arange(n)
    ke = ks + KERNEL_NS
    a, b = ks + 1_000, ke - 1_000
    al = align_dumps(a, b, ks, ke)
    assert al.drift_identified
    d = al.as_dict()
    assert d["drift_ppm"] == pytest.approx(0.0, abs=1e-6) and d["drift_uncertainty_ppm"] == pytest.approx(2_000 / 4e9 * 1e6, rel=1e-3)


def test_no_single_line_gives_the_residual_by_hand():
    """Three dumps that fill their kernels but for ±1 µs; the middle one is 15 µs late. The ends want
    offsets in [−1, +1] µs, the middle one [14, 16] µs: a line through the three times has its middle
    value at the mean of its ends, so the best margin m solves 1 − m = 14 + m: m = −6.5 µs, residual 6.5 µs."""
    ks, ke = _kernels(3)
    a, b = ks + 1_000, ke - 1_000
    a[1] += 15_000
    b[1] += 15_000
    al = align_dumps(a, b, ks, ke)
    assert al.dumps_matched == 3  # inside the matching slack (20 µs)
    assert al.residual_ns == pytest.approx(6_500.0, abs=1e-3)
    assert al.drift_range is None


def test_dumps_outside_every_kernel_are_unmatched():
    ks, ke = _kernels(3)
    a, b = ks + 20_000, ke - 20_000
    a[2] += 0.5 * STEP_NS  # between kernels 2 and 3: no kernel holds it under the common offset
    b[2] += 0.5 * STEP_NS
    al = align_dumps(a, b, ks, ke)
    assert al.dumps_matched == 2 and al.dumps_total == 3
    assert al.kernel_of_dump.tolist() == [0, 1, -1]
    none = align_dumps(np.array([0.0]), np.array([10 * KERNEL_NS]), ks, ke)  # longer than every kernel
    assert none.dumps_matched == 0 and np.isnan(none.offset_ns) and none.kernel_of_dump.tolist() == [-1]


def test_the_matching_slack_is_the_documented_one():
    """A dump 19 µs longer than its kernel on each side is still matched (slack 20 µs), one 21 µs longer is not."""
    ks, ke = _kernels(1)
    assert MATCH_SLACK_NS == 20_000.0
    assert align_dumps(ks - 19_000, ke + 19_000, ks, ke).dumps_matched == 1
    assert align_dumps(ks - 21_000, ke + 21_000, ks, ke).dumps_matched == 0


def test_two_dumps_fit_an_offset_only_half_way_between_theirs():
    """Two dumps (too few for a drift): offsets wanted 3 ms and 3.01 ms, each ±20 µs. A flat line at
    3.005 ms leaves each 15 µs of margin; its slope stays 0 and the feasible slopes are, by hand, those of
    lines through [2.98, 3.02] at t0 and [2.99, 3.03] at t1 = t0 + 1.01 ms: (−30 µs, +50 µs) / 1.01 ms... in
    probe time: t1 − t0 = 1 ms + 10 µs."""
    ks, ke = _kernels(2)
    off = np.array([3e6, 3.01e6])
    a, b = ks + 20_000 + off, ke - 20_000 + off
    al = align_dumps(a, b, ks, ke)
    assert al.dumps_matched == 2 and al.residual_ns == 0.0
    assert al.offset_ns == pytest.approx(3.005e6, abs=1e-3) and al.drift == 0.0
    dt = (a[1] + b[1]) / 2 - (a[0] + b[0]) / 2
    lo, hi = al.drift_range
    assert lo == pytest.approx((2.99e6 - 3.02e6) / dt, rel=1e-6) and hi == pytest.approx((3.03e6 - 2.98e6) / dt, rel=1e-6)


def test_three_dumps_are_enough_for_a_drift():
    ks, ke = _kernels(3)
    off = 2e6 + np.array([0.0, 10_000.0, 20_000.0])  # +10 µs per ms
    a, b = ks + 20_000 + off, ke - 20_000 + off
    al = align_dumps(a, b, ks, ke)
    t = (a + b) / 2
    assert al.drift == pytest.approx(20_000 / (t[2] - t[0]), rel=1e-9) and al.offset_ns == pytest.approx(2e6, abs=1e-3)


def test_dumps_in_any_order_match_from_the_earliest():
    ks, ke = _kernels(4)
    a, b = ks + 20_000 + 1e6, ke - 20_000 + 1e6
    order = np.array([3, 1, 0, 2])
    al = align_dumps(a[order], b[order], ks, ke)
    assert al.dumps_matched == 4 and al.kernel_of_dump.tolist() == order.tolist()
    assert al.t_ref_ns == pytest.approx((a[0] + b[0]) / 2)


def test_a_dump_exactly_the_slack_longer_than_its_kernel_is_matched():
    ks, ke = _kernels(1)
    al = align_dumps(ks - MATCH_SLACK_NS, ke + MATCH_SLACK_NS, ks, ke)
    assert al.dumps_matched == 1 and al.residual_ns == pytest.approx(MATCH_SLACK_NS)


def test_an_unmatched_alignment_is_empty():
    ks, ke = _kernels(2)
    none = align_dumps(np.array([0.0, 5.0]), np.array([10 * KERNEL_NS, 10 * KERNEL_NS + 5]), ks, ke)
    assert (none.dumps_matched, none.dumps_total, none.drift, none.t_ref_ns) == (0, 2, 0.0, 0.0)
    assert np.isnan(none.offset_ns) and np.isnan(none.residual_ns) and none.drift_range is None
    d = none.as_dict()
    assert d["drift_range_ppm"] is None and d["drift_ppm"] is None and d["drift_uncertainty_ppm"] is None


def test_manifest_entry_by_hand():
    """A drift of 2 ppm pinned to ±0.5 ppm: drift_ppm is the middle of the feasible range, the uncertainty its half width."""
    n = 5
    ks = 1e9 * np.arange(n)
    ke = ks + KERNEL_NS
    mid = (ks + ke) / 2
    tp = mid + 2e-6 * (mid - mid[0])
    a, b = tp - (KERNEL_NS / 2 - 1_000), tp + (KERNEL_NS / 2 - 1_000)
    al = align_dumps(a, b, ks, ke)
    lo, hi = al.drift_range
    d = al.as_dict()
    assert set(d) == {"offset_ns", "drift_ppm", "drift_uncertainty_ppm", "drift_range_ppm", "residual_ns", "dumps_matched", "dumps_total"}
    assert d["drift_range_ppm"] == pytest.approx([lo * 1e6, hi * 1e6], rel=1e-12)
    assert d["drift_ppm"] == pytest.approx((lo + hi) / 2 * 1e6, rel=1e-9) and d["drift_ppm"] == pytest.approx(2.0, rel=1e-3)
    assert d["drift_uncertainty_ppm"] == pytest.approx((hi - lo) / 2 * 1e6, rel=1e-9)
    assert d["offset_ns"] == al.offset_ns and (d["dumps_matched"], d["dumps_total"], d["residual_ns"]) == (5, 5, 0.0)
    # not identified: the range is given, drift and uncertainty are not
    wide = align_dumps(ks + 20_000, ke - 20_000, ks, ke).as_dict()
    assert wide["drift_ppm"] is None and wide["drift_uncertainty_ppm"] is None and wide["drift_range_ppm"] is not None


def test_a_tie_whose_first_offset_leaves_a_residual_is_decided_by_the_offset_nearest_zero():
    """Two dumps, d0 = [0, 50] and d1 = [1000, 1050] ns, slack 20 ns, and two kernel pairs that each hold both
    dumps under one offset: A = [-600, -540], [400, 445] (offset 595 ns, d1 10 ns past A's second kernel: matched
    within the slack, but no line fits both: residual (605 - 600) / 2 = 2.5 ns) and B = [-5, 55], [995, 1055]
    (offset 0, both inside). A's kernel starts first, so the first best offset is A's; with a residual left, the
    tied offsets decide (module text): both feasible, B's nearest zero, and B's fit leaves no residual."""
    ks = np.array([-600.0, -5.0, 400.0, 995.0])
    ke = np.array([-540.0, 55.0, 445.0, 1055.0])
    al = align_dumps(np.array([0.0, 1000.0]), np.array([50.0, 1050.0]), ks, ke, slack_ns=20.0)
    assert al.dumps_matched == 2 and al.residual_ns == 0.0
    assert al.offset_ns == 0.0 and al.drift == 0.0
    assert list(al.kernel_of_dump) == [1, 3]  # B's kernels, in the order given


def _interval_dumps(lo, hi, t):
    """Dumps and kernels whose allowed offsets are exactly [lo_i, hi_i] at dump centre t_i (100 ns dumps): a dump
    [t − 50, t + 50] inside a kernel [t − 50 − hi, t + 50 − lo] allows the offsets [lo, hi]."""
    a, b = np.asarray(t) - 50.0, np.asarray(t) + 50.0
    return a, b, a - np.asarray(hi), b - np.asarray(lo)


def test_two_dumps_that_no_constant_offset_fits_are_fitted_with_a_drift():
    """d0 allows offsets [0, 10] ns at t = 0, d1 [20, 30] at t = 1 s: no constant offset fits (margin (10 − 20)/2 =
    −5), the line through the middles does: 5 ns + 2e-8 · t, margin 5, and every slope from (20 − 10)/1e9 to
    (30 − 0)/1e9 fits (the drift range)."""
    a, b, ks, ke = _interval_dumps([0.0, 20.0], [10.0, 30.0], [0.0, 1e9])
    al = align_dumps(a, b, ks, ke)
    assert al.residual_ns == 0.0 and al.dumps_matched == 2
    assert al.offset_ns == pytest.approx(5.0, abs=1e-6) and al.drift == pytest.approx(2e-8, rel=1e-9)
    assert al.drift_range == pytest.approx((1e-8, 3e-8), rel=1e-9)


def test_two_dumps_that_a_constant_offset_just_fits_keep_it():
    """d0 allows [0, 10], d1 [10, 20]: the constant offset 10 fits both with margin 0, so no drift is fitted."""
    a, b, ks, ke = _interval_dumps([0.0, 10.0], [10.0, 20.0], [0.0, 1e9])
    al = align_dumps(a, b, ks, ke)
    assert al.residual_ns == 0.0 and al.drift == 0.0 and al.offset_ns == pytest.approx(10.0, abs=1e-9)


def test_a_residual_leaves_the_drift_range_unknown():
    """Three dumps in a zigzag no line fits ([0, 1], [5, 6], [0, 1] at 0, 1, 2 s): a residual, no slope range."""
    a, b, ks, ke = _interval_dumps([0.0, 5.0, 0.0], [1.0, 6.0, 1.0], [0.0, 1e9, 2e9])
    al = align_dumps(a, b, ks, ke)
    assert al.residual_ns > 0 and al.drift_range is None and not al.drift_identified


def _exact_slope_range(t, lo, hi):
    """The least and greatest c1 with lo_i ≤ c0 + c1·t_i ≤ hi_i for every i, by brute force in rational arithmetic:
    the feasible polygon's vertices are where two constraint lines meet; None when none is feasible."""
    from fractions import Fraction as F
    from itertools import combinations

    lines = [(F(float(ti)), F(float(v))) for ti, l, h in zip(t, lo, hi) for v in (l, h)]  # c0 + c1·t = v
    best = []
    for (t1, v1), (t2, v2) in combinations(lines, 2):
        if t1 == t2:
            continue
        c1 = (v1 - v2) / (t1 - t2)
        c0 = v1 - c1 * t1
        if all(F(float(l)) <= c0 + c1 * F(float(ti)) <= F(float(h)) for ti, l, h in zip(t, lo, hi)):
            best.append(c1)
    return (min(best), max(best)) if best else None


def test_the_slope_range_is_the_feasible_polygons_extent():
    """collectors/align._slope_range against the brute force: random intervals around a drifting line (3–6 dumps,
    two of them at one time in some cases), and empty cases; the ends agree to 1e-12 relative."""
    from xstage_trace.collectors.align import _slope_range

    rng = np.random.default_rng(11)
    seen = {"range": 0, "none": 0}
    for case in range(40):
        n = int(rng.integers(3, 7))
        t = np.sort(rng.uniform(0, 4e9, n))
        if case % 3 == 0:
            t[1] = t[0]  # two dumps at one time: lines of one slope
        t -= t[0]
        mid = rng.uniform(-1e4, 1e4) + rng.uniform(-5e-6, 5e-6) * t + rng.normal(0, 3e2 if case % 2 else 3e3, n)
        lo, hi = mid - rng.uniform(5e2, 5e3, n), mid + rng.uniform(5e2, 5e3, n)
        want = _exact_slope_range(t, lo, hi)
        got = _slope_range(t, lo, hi)
        if want is None:
            assert got is None
            seen["none"] += 1
            continue
        seen["range"] += 1
        assert got is not None
        for g, w in zip(got, want):
            assert abs(g - float(w)) <= 1e-12 * max(abs(float(w)), 1e-9)
    assert seen["range"] >= 10 and seen["none"] >= 5
