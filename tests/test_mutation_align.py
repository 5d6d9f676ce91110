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
