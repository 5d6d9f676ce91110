"""Q(K) from the isolated knee and the periodic transients (analysis/calibration_capacity.py, docs/model.md §3, §4)
on sweeps small enough to work through by hand: every number asserted below is derived in the comments from
the module docstring's rules (knee factors 1.05 tail / 1.15 body, trend over 2 octaves, ties within 1e-6 %)."""

from __future__ import annotations

import numpy as np
import pytest

from xstage_trace.analysis.calibration_capacity import (Knee, _allowed, _body_knee_index, _persistent_from, _widened,
                                                        choose_capacity, estimate_capacity, floor_trend_ns, isolated_knee)

A = np.array


def test_floor_trend_of_one_point_is_proportional():
    # below: 100 and 1000; only 1000 is within 2 octaves of 1000 (≥ 250): T = 200·V/1000
    trend = floor_trend_ns(A([100.0, 1000.0, 3000.0]), A([50.0, 200.0, 9.0]), A([True, True, False]))
    assert trend(A([2000, 500])).tolist() == pytest.approx([400.0, 100.0])


def test_floor_trend_is_affine_over_two_octaves():
    # 1000 is exactly 2 octaves under 4000 (kept): T = 50 + 0.1·V through both (a proportional bound would give 0.1125·V)
    assert float(floor_trend_ns(A([1000.0, 4000.0]), A([150.0, 450.0]), A([True, True]))(8000.0)) == pytest.approx(850.0)
    # 700 is more than 2 octaves under 4000 (< 1000): left out, the line through the other three stays 50 + 0.1·V
    v, t = A([700.0, 1000.0, 2000.0, 4000.0]), A([1000.0, 150.0, 250.0, 450.0])
    assert float(floor_trend_ns(v, t, np.ones(4, bool))(8000.0)) == pytest.approx(850.0)


def test_floor_trend_is_a_relative_least_squares_line():
    v, t = A([1000.0, 2000.0, 4000.0]), A([100.0, 300.0, 400.0])
    # minimise Σ((a + b·V − T)/T)²: least squares of [1/T, V/T]·(a, b) = 1
    (a, b), *_ = np.linalg.lstsq(np.column_stack([1 / t, v / t]), np.ones(3), rcond=None)
    assert float(floor_trend_ns(v, t, np.ones(3, bool))(3000.0)) == pytest.approx(a + 3000 * b)


def test_persistent_from_by_hand():
    assert _persistent_from(A([False, True, True])) == 1
    assert _persistent_from(A([True, False, True, True])) == 2  # one early True does not make it persistent
    assert _persistent_from(A([True, True])) == 0 and _persistent_from(A([True])) == 0
    assert _persistent_from(A([True, False])) is None and _persistent_from(A([False])) is None


def test_body_knee_by_hand():
    # i = 1: floor 0.1·V from (1000, 100): 1.15·[200, 400] = [230, 460] < [300, 600]: a knee at the second volume
    assert _body_knee_index(A([1000.0, 2000.0, 4000.0]), A([100.0, 300.0, 600.0])) == 1
    # proportional medians: never above 1.15 × the floor
    assert _body_knee_index(A([1000.0, 2000.0, 4000.0]), A([100.0, 200.0, 400.0])) is None
    # i = 1: 1.15·0.1·[2000, 4000, 8000] = [230, 460, 920]: 200 is not above; i = 2: line 0.1·V, 1.15·[400, 800] = [460, 920]:
    # 400 not above; i = 3: line 0.1·V, 1.15·800 = 920 < 1000: the fourth volume
    assert _body_knee_index(A([1000.0, 2000.0, 4000.0, 8000.0]), A([100.0, 200.0, 400.0, 1000.0])) == 3


def test_body_knee_takes_the_larger_of_the_line_and_the_proportional_bound():
    v = A([1000.0, 2000.0, 4000.0])
    # i = 1: 1.15·0.2·[2000, 4000] = [460, 920]: 300 is not above. i = 2: the line through (1000, 200), (2000, 300) gives
    # 500 at 4000, the proportional bound 300·4000/2000 = 600: the floor is 600, 1.15·600 = 690
    assert _body_knee_index(v, A([200.0, 300.0, 650.0])) is None  # 650 ≤ 690 (above 1.15·500 = 575 only)
    assert _body_knee_index(v, A([200.0, 300.0, 700.0])) == 2
    # exactly 1.15 × the floor is not above it: (1000, 1000) gives 1000·V/1000, 1.15·2000 = 2300
    assert _body_knee_index(A([1000.0, 2000.0]), A([1000.0, 2300.0])) is None
    assert _body_knee_index(A([1000.0, 2000.0]), A([1000.0, 2301.0])) == 1


def test_tail_knee_by_hand():
    # proportional medians (no body knee); p90 over 1.05 × median from 4000 on (210 = 1.05·200 exactly is not over).
    # Given out of order. Trend over 1000, 2000: 0.1·V. R = 2: Q in [2000 − 2·200, 4000 − 2·400] = [1600, 3200]
    knee, trend = isolated_knee([4000, 1000, 8000, 2000], [430, 100, 900, 210], [400, 100, 800, 200], 2.0)
    assert knee == Knee("tail", 2000.0, 4000.0, pytest.approx(1600.0), pytest.approx(3200.0))
    assert float(trend(6000.0)) == pytest.approx(600.0)


def test_body_knee_of_isolated_launches():
    # two volumes: no tail (p90 = median); body knee at 2000 (test_body_knee_by_hand); trend 0.1·V from 1000 alone.
    # R = 2: Q in [1000 − 200, 2000 − 400] = [800, 1600]
    knee, trend = isolated_knee([1000, 2000], [100, 300], [100, 300], 2.0)
    assert knee == Knee("body", 1000.0, 2000.0, pytest.approx(800.0), pytest.approx(1600.0))
    assert float(trend(3000.0)) == pytest.approx(300.0)


def test_the_earlier_detector_gives_the_knee():
    v, med = [1000, 2000, 4000, 8000], [100, 200, 400, 1000]  # body knee at 8000 (i = 3)
    tail_first = isolated_knee(v, [100, 200, 500, 1100], med, 1.0)[0]  # tail from 4000 (i = 2)
    assert (tail_first.detector, tail_first.v_lo_bytes, tail_first.v_hi_bytes) == ("tail", 2000.0, 4000.0)
    body_first = isolated_knee(v, [100, 200, 400, 1100], med, 1.0)[0]  # tail from 8000 too: a tie goes to the tail
    assert (body_first.detector, body_first.v_hi_bytes) == ("tail", 8000.0)
    v, med = [1000, 2000, 4000], [100, 300, 600]  # body knee at 2000; tail only at 4000
    assert isolated_knee(v, [100, 300, 700], med, 1.0)[0].detector == "body"


def test_no_knee_up_to_the_largest_volume_gives_a_lower_bound():
    # affine medians 50 + 0.1·V: no body knee (i = 1: 1.15·0.15·V; i = 2: max(450, 500)·1.15 = 575 > 450), p90 = median.
    # Trend over all three: 50 + 0.1·V; Q ≥ 4000 − 2·450 = 3100
    knee, trend = isolated_knee([1000, 2000, 4000], [150, 250, 450], [150, 250, 450], 2.0)
    assert knee == Knee("none", 4000.0, None, pytest.approx(3100.0), None)
    assert float(trend(8000.0)) == pytest.approx(850.0)


def test_no_isolated_knee_without_a_volume_below_it_or_with_one_volume():
    assert isolated_knee([1000, 2000], [200, 400], [100, 200], 1.0) == (None, None)  # p90 over from the smallest volume
    assert isolated_knee([1000], [100], [100], 1.0) == (None, None)


def test_allowed_grid_points_by_hand():
    q = A([1.0, 2.0, 4.0, 8.0, 16.0])
    assert _allowed(q, None).tolist() == [True] * 5
    assert _allowed(q, Knee("none", 1.0, None, 4.0, None)).tolist() == [False, False, True, True, True]
    assert _allowed(q, Knee("tail", 1.0, 2.0, 2.0, 8.0)).tolist() == [False, True, True, True, False]  # both edges in


def test_widened_tie_range_by_hand():
    q = A([1.0, 2.0, 4.0, 8.0, 16.0])
    assert _widened(q, A([False, True, True, False, False]), None) == (1.0, 8.0)  # out to the neighbours
    assert _widened(q, A([True, False, False, False, False]), None) == (1.0, 2.0)  # the grid's ends hold
    assert _widened(q, A([False, False, False, False, True]), None) == (8.0, 16.0)
    assert _widened(q, A([False, True, True, False, False]), Knee("tail", 1.0, 2.0, 1.5, 6.0)) == (1.5, 6.0)  # clipped
    assert _widened(q, A([False, True, True, False, False]), Knee("none", 1.0, None, 0.5, None)) == (1.0, 8.0)


def test_choose_capacity_by_hand():
    q = A([1.0, 2.0, 4.0, 8.0, 16.0])
    # minimum at 4 and 8 (tied): geometric centre √32; range to the neighbours 2 … 16
    assert choose_capacity(q, A([5.0, 3.0, 1.0, 1.0, 4.0]), None) == (pytest.approx(np.sqrt(32.0)), (2.0, 16.0))
    # ties are within 1e-6 (percentage points) of the minimum, edge included
    assert choose_capacity(q, A([5.0, 1.0 + 1e-6, 1.0, 3.0, 4.0]), None) == (pytest.approx(np.sqrt(8.0)), (1.0, 8.0))
    assert choose_capacity(q, A([5.0, 1.0 + 2e-6, 1.0, 3.0, 4.0]), None) == (pytest.approx(4.0), (2.0, 8.0))
    # the knee bracket [3, 20] allows 4, 8, 16: the smallest error inside it is at 16
    assert choose_capacity(q, A([0.0, 0.0, 2.0, 3.0, 1.0]), Knee("tail", 1.0, 2.0, 3.0, 20.0)) == (pytest.approx(16.0), (8.0, 16.0))


def test_choose_capacity_where_the_transients_do_not_tell():
    q = A([1.0, 2.0, 4.0, 8.0, 16.0])
    flat = A([1.0, 1.0, 1.0, 1.0, 1.0])
    # flat over all the bracket [2, 8] allows: its geometric centre 4; the range clipped to the bracket
    assert choose_capacity(q, flat, Knee("tail", 1.0, 2.0, 2.0, 8.0)) == (pytest.approx(4.0), (2.0, 8.0))
    assert choose_capacity(q, None, Knee("tail", 1.0, 2.0, 2.0, 8.0)) == (pytest.approx(4.0), None)
    # bracket ends below 1 B count as 1 B: √(1·400) = 20, √(1·1) = 1
    assert choose_capacity(q, None, Knee("tail", 1.0, 2.0, -100.0, 400.0)) == (pytest.approx(20.0), None)
    assert choose_capacity(q, None, Knee("tail", 1.0, 2.0, -5.0, -2.0)) == (pytest.approx(1.0), None)
    # no grid point inside the bracket [2.5, 3.5]: its centre, no range
    assert choose_capacity(q, flat, Knee("tail", 1.0, 2.0, 2.5, 3.5)) == (pytest.approx(np.sqrt(2.5 * 3.5)), None)
    # a lower bound alone, or nothing: no estimate
    assert choose_capacity(q, flat, Knee("none", 1.0, None, 3.0, None)) == (None, (3.0, 16.0))  # 2 … 16, clipped at 3
    assert choose_capacity(q, None, Knee("none", 1.0, None, 3.0, None)) == (None, None)
    assert choose_capacity(q, None, None) == (None, None)
    assert choose_capacity(q, flat, None) == (None, (1.0, 16.0))


GRID = A([1.0, 2.0, 4.0, 8.0, 16.0])
# Two periodic launches: one has its smallest error at Q = 2, the other at 8. Mean [4, 1.5, 2, 1.75, 4]: Q = 2,
# ties only 2, range 1 … 4. A bootstrap resample of the two takes (2, 0), (1, 1) or (0, 2) copies: the first two give
# Q = 2 (means [4, 0, 2, 3, 4] and the full one), the last Q = 8; (0, 2) has probability 1/4, so over 200
# resamples the 5th percentile is 2 and the 95th 8. Interval: [min(2, 1), max(8, 4)] = [1, 8].
TWO = A([[4.0, 0.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 0.5, 4.0]])


def test_estimate_from_the_transients_alone():
    c = estimate_capacity(GRID, TWO, A([]), A([]), A([]), 2.0, np.random.default_rng(0))
    assert (c.q_bytes, c.interval_bytes, c.transient_bytes, c.knee) == (pytest.approx(2.0), pytest.approx((1.0, 8.0)), (1.0, 4.0), None)
    assert c.source == "periodic transients through the recurrence (no isolated launches at this K)"


def test_estimate_with_a_knee_and_the_transients():
    # the tail knee of test_tail_knee_by_hand: Q in [1600, 3200]; one periodic launch, smallest error at 4000 but at
    # 2000 inside the bracket (which allows 2000 and 2500)
    grid = A([1000.0, 2000.0, 2500.0, 4000.0])
    iso = (A([1000.0, 2000.0, 4000.0, 8000.0]), A([100.0, 210.0, 430.0, 900.0]), A([100.0, 200.0, 400.0, 800.0]))
    c = estimate_capacity(grid, A([[3.0, 1.0, 2.0, 0.0]]), *iso, 2.0, np.random.default_rng(0))
    assert c.knee == Knee("tail", 2000.0, 4000.0, pytest.approx(1600.0), pytest.approx(3200.0))
    assert c.source == "isolated knee (tail detector, persistent) with the periodic transients"
    # ties: 2000 alone; its range out to the neighbours 1000 … 2500, clipped to the bracket: 1600 … 2500
    assert c.q_bytes == pytest.approx(2000.0) and c.transient_bytes == (pytest.approx(1600.0), 2500.0)
    # A resample S of the four isolated launches (p90 over 1.05 × median at 4000 and 8000 only; medians 0.1·V, so
    # every trend is 0.1·V and Q brackets are 0.8·[V_lo, V_hi]): 4000 in S with 1000 or 2000 → bracket ⊂ [800, 3200]
    # → 2000 (probability ≈ 1 − (3/4)^4 less a little); any other S → no bracket below 4000 or none → 4000 (the
    # launch's minimum). Both well over 5 % of 200: percentiles 2000 and 4000; joined with the range: [1600, 4000]
    assert c.interval_bytes == (pytest.approx(1600.0), pytest.approx(4000.0))


def test_estimate_from_a_knee_bracket_alone_and_a_lower_bound():
    v, med = A([1000.0, 2000.0]), A([100.0, 300.0])  # the body knee of test_body_knee_of_isolated_launches, R = 2: [800, 1600]
    c = estimate_capacity(GRID, None, v, med, med, 2.0, np.random.default_rng(0))
    # no transients: the bracket's centre √(800·1600); a resample of 2 launches keeps both (1/2) or one (no knee,
    # no draw): every draw is the centre
    assert c.q_bytes == pytest.approx(np.sqrt(800.0 * 1600.0)) and c.interval_bytes == (pytest.approx(c.q_bytes), pytest.approx(c.q_bytes))
    assert c.transient_bytes is None and c.source == "isolated knee (body detector, persistent)"
    # no knee up to 4000 (test_no_knee_up_to_the_largest_volume_gives_a_lower_bound): Q ≥ 3100, transients flat above it
    grid = A([1000.0, 4000.0, 16000.0])
    iso = A([1000.0, 2000.0, 4000.0]), A([150.0, 250.0, 450.0]), A([150.0, 250.0, 450.0])
    c = estimate_capacity(grid, A([[0.0, 2.0, 1.0]]), *iso, 2.0, np.random.default_rng(0))
    assert c.q_bytes == pytest.approx(16000.0) and c.source == "isolated floor up to the largest volume (Q above it) with the periodic transients"
    none = estimate_capacity(grid, A([[0.0, 1.0, 1.0]]), *iso, 2.0, np.random.default_rng(0))
    assert (none.q_bytes, none.interval_bytes, none.source) == (None, None, "not identifiable")
    assert none.knee.detector == "none" and none.transient_bytes == (pytest.approx(3100.0), 16000.0)


# Isolated launches at 1000, 2000, 4000 B with medians 0.1·V (every trend 0.1·V, Q brackets 0.8·[V_lo, V_hi] at R = 2)
# and p90 over 1.05 × median at 4000 only; one periodic launch over the grid 1000 … 4000, smallest error at 4000,
# at 1000 among 1000 … 2500 and at 2000 among 2000, 2500.
KNEE_GRID, KNEE_ERR = A([1000.0, 2000.0, 2500.0, 4000.0]), A([[0.5, 1.0, 2.0, 0.0]])


def test_the_bootstrap_resamples_the_isolated_launches():
    v, p90, med = A([1000.0, 2000.0, 4000.0]), A([100.0, 200.0, 430.0]), A([100.0, 200.0, 400.0])
    c = estimate_capacity(KNEE_GRID, KNEE_ERR, v, p90, med, 2.0, np.random.default_rng(0))
    # all three: tail knee [1600, 3200] → 2000; ties 2000 alone, out to 1000 … 2500, clipped: 1600 … 2500
    assert c.q_bytes == pytest.approx(2000.0) and c.transient_bytes == (pytest.approx(1600.0), 2500.0)
    # resamples of 3 launches: {1000, 4000} (6 of the 27 draw sequences, 22 %) → bracket [800, 3200] → 1000;
    # {2000, 4000} or all → 2000; {1000, 2000} → Q ≥ 1600 → 4000; one launch → no knee → 4000.
    # 5th / 95th percentiles 1000 / 4000
    assert c.interval_bytes == (pytest.approx(1000.0), pytest.approx(4000.0))


def test_the_bootstrap_resamples_two_isolated_launches():
    # 1000 (below) and 4000 (tail over): knee [800, 3200] → 1000; ties 1000 alone: 1000 … 2000.
    # Resamples: both (1/2) → 1000, one of them → no knee → 4000: interval [1000, 4000]
    c = estimate_capacity(KNEE_GRID, KNEE_ERR, A([1000.0, 4000.0]), A([100.0, 430.0]), A([100.0, 400.0]), 2.0, np.random.default_rng(0))
    assert c.q_bytes == pytest.approx(1000.0) and c.transient_bytes == (1000.0, 2000.0)
    assert c.interval_bytes == (pytest.approx(1000.0), pytest.approx(4000.0))
