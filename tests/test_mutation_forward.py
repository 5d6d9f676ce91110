"""The forward prediction (analysis/forward.py, docs/model.md §11, Eq. 38–43 and Eq. 48, the buffer wait of §12/§13)
on small hand-made launches whose answers are worked out by hand in the comments, and against a sequential reference
of §11's recurrence (a few lines of Python, one tile at a time; docs/mutation.md: written against the mutants the
older forward tests let through)."""

from __future__ import annotations

import numpy as np
import pytest

from xstage_trace.analysis.forward import LinkModel, forward_launch, forward_tiles

R = 50.0  # GB/s = bytes/ns: 1000 bytes drain in 20 ns, 100 bytes in 2 ns


def _assert_forward(f, issue, accept, drained, start, stall, kernel):
    np.testing.assert_allclose(f.store_issue_ns, issue)
    np.testing.assert_allclose(f.accept_ns, accept)
    np.testing.assert_allclose(f.drained_ns, drained)
    np.testing.assert_allclose(f.compute_start_ns, start)
    np.testing.assert_allclose(f.stall_ns, stall)
    assert f.kernel_ns == pytest.approx(kernel)


# ---------------------------------------------------------------- one CTA: Eq. 38–41 term by term


def test_store_issue_acceptance_and_drain_with_an_epilogue_per_tile_by_hand():
    # one CTA, compute [100, 50], epilogue [5, 7], 1000 bytes each (20 ns at R = 50), Q = 500 B (10 ns ahead of the
    # drain), T_iss^0 = 3, λ = 0. Tile 0: compute 0..100, store issued at 105, drained 125, accepted
    # max(105 + 3, 125 − 10) = 115. Tile 1's loads at the store issue 105 wait for it: back at 125, compute 125..175
    # (stall 175 − 105 − 50 = 20), store at 182, drained 202, accepted max(185, 192) = 192. Kernel: the last drain, 202.
    f = forward_tiles([0, 0], [0, 1], 1000.0, [100.0, 50.0], LinkModel(R, 500.0, issue_floor_ns=3.0), epilogue_ns=[5.0, 7.0])
    _assert_forward(f, [105, 182], [115, 192], [125, 202], [0, 125], [0, 20], 202)


def test_loads_at_the_acceptance_wait_less_than_loads_at_the_issue_by_hand():
    # one CTA, compute 100 then 50, 1000 bytes, Q = 500 B, T_iss^0 = 3, λ = 4 (the compute gap holds it). Tile 0's
    # store: issued 100, drained 120, accepted max(103, 120 − 10) = 110.
    # "accept": tile 1's loads at 110 return at max(110 + 4, F(110) = 120) = 120, its compute starts 120 − λ = 116 and
    # ends 166: stall 166 − 110 − 50 = 6 ([F(ℓ) − ℓ − λ]₊). Store at 166, drained 186, accepted max(169, 176) = 176.
    # "issue": loads at 100 return at 120 too, compute 116..166, stall 166 − 100 − 50 = 16.
    m = LinkModel(R, 500.0, load_latency_ns=4.0, issue_floor_ns=3.0)
    acc = forward_tiles([0, 0], [0, 1], 1000.0, [100.0, 50.0], m, load_issue="accept")
    _assert_forward(acc, [100, 166], [110, 176], [120, 186], [0, 116], [0, 6], 186)
    iss = forward_tiles([0, 0], [0, 1], 1000.0, [100.0, 50.0], m, load_issue="issue")
    np.testing.assert_allclose(iss.stall_ns, [0, 16])


def test_an_unknown_load_issue_is_refused_by_name():
    with pytest.raises(ValueError, match=r"load_issue 'store' is not one of \('issue', 'accept'\)"):
        forward_tiles([0], [0], 1.0, 1.0, LinkModel(R, 0.0), load_issue="store")


@pytest.mark.parametrize("steps, stages", [(0, None), (2, 0), ([1, 0], 1)])
def test_fewer_than_one_step_or_stage_is_refused(steps, stages):
    with pytest.raises(ValueError, match="^steps and stages must be >= 1$"):
        forward_tiles([0, 0], [0, 1], 1.0, 1.0, LinkModel(R, 0.0), steps=steps, stages=stages)


def test_one_cta_with_positions_that_repeat_is_refused_but_other_ctas_may_share_them():
    with pytest.raises(ValueError, match="^two tiles of one CTA share a position$"):
        forward_tiles([0, 1, 1], [0, 4, 4], 1.0, 1.0, LinkModel(R, 0.0))
    f = forward_tiles([0, 1], [4, 4], 1.0, 1.0, LinkModel(R, 0.0))  # one tile each at position 4: fine
    np.testing.assert_allclose(f.stall_ns, [0, 0])


def test_no_tiles_give_an_empty_prediction_of_zero_time():
    f = forward_tiles([], [], 1.0, 1.0, LinkModel(R, 0.0))
    assert f.kernel_ns == 0.0 and len(f.stall_ns) == 0 and len(f.store_issue_ns) == 0
    assert all(len(x) == 0 for x in (f.accept_ns, f.drained_ns, f.compute_start_ns, f.kernel_by_launch_ns))  # no launch
    g, stall = forward_launch([], [], 1.0, 1.0, LinkModel(R, 0.0), cover_tiles=1, plain_store=True)
    assert g.kernel_ns == 0.0 and len(stall) == 0


def test_rows_in_any_order_and_gaps_in_positions_by_hand():
    # CTA 7: positions 2, 9 (its tiles 0 and 1); CTA 3: position 5 alone. Compute 100, 1000 bytes, λ = 0, Q = 0.
    # CTA 7's tile 0 and CTA 3's tile store at 100 (CTA 3's first: the lower CTA id, then stable): CTA 3's drains
    # 100..120, CTA 7's 120..140. CTA 7's tile 1 loads at 100 (positive lag 0) see both: back at 140, compute
    # 140..240 (stall 40), store 240 → 260. The rows come back in the input's order.
    f = forward_tiles([7, 3, 7], [9, 5, 2], 1000.0, 100.0, LinkModel(R, 0.0))
    _assert_forward(f, [240, 100, 100], [260, 120, 140], [260, 120, 140], [140, 0, 0], [40, 0, 0], 260)


def test_a_positive_lag_per_tile_delays_its_own_loads_by_hand():
    # one CTA, three tiles of compute 10, 1000 bytes (20 ns), λ = 0; lag per tile [99, 5, 30] (tile 0's is unused).
    # Tile 0: store at 10, drained 30. Tile 1's loads at 10 + 5 = 15: back at 30, compute 30..40, stall 40 − 15 − 10 = 15,
    # store 40, drained 60. Tile 2's loads at 40 + 30 = 70 (after the drain): compute 70..80, stall 0, store 80 → 100.
    f = forward_tiles([0, 0, 0], [0, 1, 2], 1000.0, 10.0, LinkModel(R, 0.0), load_lag_ns=[99.0, 5.0, 30.0])
    _assert_forward(f, [10, 40, 80], [30, 60, 100], [30, 60, 100], [0, 30, 70], [0, 15, 0], 100)


def test_a_negative_lag_returns_early_but_computes_after_the_previous_store_by_hand():
    # one CTA, compute [10, 10, 10], 1000 bytes, λ = 2, lag −6 on tiles 1 and 2. Tile 0: compute 0..10, store 10,
    # drained 30. Tile 1's loads at 10 − 6 = 4 see no store: back at 4 + λ = 6, but the CTA is busy until its store at
    # 10: back max(6, 10 + 2) = 12, compute 10..20, stall 20 − max(4, 10) − 10 = 0, store 20, drained 30..50.
    # Tile 2's loads at 20 − 6 = 14 see store 0 (issued 10, drained 30): back max(14 + 2, 30) = 30, compute 28..38,
    # stall 38 − max(14, 20) − 10 = 8, store 38, drained 50..70.
    f = forward_tiles([0, 0, 0], [0, 1, 2], 1000.0, 10.0, LinkModel(R, 0.0, load_latency_ns=2.0), load_lag_ns=[0.0, -6.0, -6.0])
    _assert_forward(f, [10, 20, 38], [30, 50, 70], [30, 50, 70], [0, 10, 28], [0, 0, 8], 70)


# ---------------------------------------------------------------- the window w and the load server


def test_stores_issued_within_the_window_after_a_load_go_first_by_hand():
    # CTA 0: tile 0 computes 100, stores 1000 bytes at 100 (drained 120); CTA 1: tile 0 computes 105, stores at 105
    # (drained 140). Tile 1 of each computes 50. w = 0: CTA 0's loads at 100 see its own store only: back 120, compute
    # 120..170, stall 20; CTA 1's at 105 see both (issued at or before 105): back 140, compute 140..190, stall 35.
    # Stores 170 → 190 and 190 → 210: kernel 210.
    args = ([0, 0, 1, 1], [0, 1, 0, 1], 1000.0, [100.0, 50.0, 105.0, 50.0])
    f = forward_tiles(*args, LinkModel(R, 0.0))
    _assert_forward(f, [100, 170, 105, 190], [120, 190, 140, 210], [120, 190, 140, 210], [0, 120, 0, 140], [0, 20, 0, 35], 210)
    # w = 10: CTA 0's loads at 100 also wait for CTA 1's store issued at 105 ≤ 110: back 140, stall 40; both tile 1s
    # compute 140..190 and store at 190, drained 210 (CTA 0 first) and 230.
    g = forward_tiles(*args, LinkModel(R, 0.0, window_ns=10.0))
    _assert_forward(g, [100, 190, 105, 190], [120, 210, 140, 230], [120, 210, 140, 230], [0, 140, 0, 140], [0, 40, 0, 35], 230)


def test_a_window_longer_than_the_work_resolves_the_earliest_loads_with_the_stores_known_by_hand():
    # as above with w = 100 > the 50 ns of work: no load can see every store in its window, so the earliest (CTA 0's
    # at 100) is resolved with the stores known, both tile 0s (drained 140): compute 140..190, stall 40, store 190.
    # Then CTA 1's loads at 105 see every store up to 205, CTA 0's at 190 too (its drain 140 → 210 behind them):
    # back 210, compute 210..260, stall 105, store 260 → 280.
    f = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], 1000.0, [100.0, 50.0, 105.0, 50.0], LinkModel(R, 0.0, window_ns=100.0))
    _assert_forward(f, [100, 190, 105, 260], [120, 210, 140, 280], [120, 210, 140, 280], [0, 140, 0, 210], [0, 40, 0, 105], 280)


def test_loads_released_together_are_served_first_in_first_out_at_the_load_rate_by_hand():
    # two CTAs in lockstep: tile 0s compute 100 and store 1000 bytes at 100 (drained 120, 140); both tile 1s' loads
    # (at 100) are released at 140 and served at 10 B/ns: CTA 0's 200 bytes 140..160, CTA 1's 400 bytes 160..200.
    # Compute 50 each: CTA 0 160..210 (stall 60), CTA 1 200..250 (stall 100); stores 210 → 230, 250 → 270.
    m = LinkModel(R, 0.0, load_rate_gbps=10.0)
    f = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], 1000.0, [100.0, 50.0, 100.0, 50.0], m, load_bytes=[0.0, 200.0, 0.0, 400.0])
    _assert_forward(f, [100, 210, 100, 250], [120, 230, 140, 270], [120, 230, 140, 270], [0, 160, 0, 200], [0, 60, 0, 100], 270)


def test_a_later_batch_of_loads_waits_for_the_load_server_by_hand():
    # CTA 0: tile 0 computes 10 and stores nothing (drained at 10), tile 1 loads 1000 bytes at 10 B/ns (100 ns) and
    # computes 10. CTA 1: tile 0 computes 30, stores nothing; tile 1 loads 100 bytes (10 ns), computes 10.
    # CTA 0's loads at 10 occupy the server 10..110 (compute 110..120, stall 100); CTA 1's, released at 30, wait
    # behind them: served 110..120, compute 120..130, stall 90 (not 10).
    m = LinkModel(R, 0.0, load_rate_gbps=10.0)
    f = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], 0.0, [10.0, 10.0, 30.0, 10.0], m, load_bytes=[0.0, 1000.0, 0.0, 100.0])
    np.testing.assert_allclose(f.compute_start_ns, [0, 110, 0, 120])
    np.testing.assert_allclose(f.stall_ns, [0, 100, 0, 90])
    assert f.kernel_ns == pytest.approx(130.0)


# ---------------------------------------------------------------- streamed loads (S steps, D stages)


def test_two_stages_of_four_steps_wait_behind_stores_issued_while_computing_by_hand():
    # λ = 0, c = 40 / 4 = 10. Steps 0, 1 load at ℓ = 100 and arrive at 120 (behind the own store). Step j ≥ 2 is loaded
    # when step j − 2 is done: 120 + (j − 1)·10 = 130, 140, both after CTA 1's store (125): they arrive at 225.
    # End = max(120 + 40, 120 + 30, 225 + 20, 225 + 10) = 245: stall 245 − 100 − 40 = 105; store 245 → 265.
    args = ([0, 0, 1], [0, 1, 0], [1000.0, 1000.0, 5000.0], [100.0, 40.0, 125.0], LinkModel(R, 0.0))
    f = forward_tiles(*args, steps=[1, 4, 1], stages=2)
    np.testing.assert_allclose(f.stall_ns, [0, 105, 0])
    np.testing.assert_allclose(f.store_issue_ns, [100, 245, 125])
    assert f.kernel_ns == pytest.approx(265.0)
    # stages = steps (and by default, and more stages than steps): every step loads at ℓ, stall 20 only
    for stages in (4, None, 8):
        np.testing.assert_allclose(forward_tiles(*args, steps=[1, 4, 1], stages=stages).stall_ns, [0, 20, 0])
    # one step by default: one stage loads it all
    np.testing.assert_allclose(forward_tiles(*args, stages=1).stall_ns, [0, 20, 0])


def test_streamed_steps_carry_the_load_latency_by_hand():
    # the case above with λ = 4 (C = 40 holds it): c = (40 − 4) / 4 = 9. Steps 0, 1 arrive at max(104, 120) = 120
    # (compute start 116); steps 2, 3 load at 120 + 9 = 129 and 138 and arrive at max(129 + 4, 225) = 225.
    # End = max(120 + 36, 120 + 27, 225 + 18, 225 + 9) = 243: stall 243 − 100 − 40 = 103.
    args = ([0, 0, 1], [0, 1, 0], [1000.0, 1000.0, 5000.0], [100.0, 40.0, 125.0], LinkModel(R, 0.0, load_latency_ns=4.0))
    f = forward_tiles(*args, steps=[1, 4, 1], stages=2)
    np.testing.assert_allclose(f.stall_ns, [0, 103, 0])
    np.testing.assert_allclose(f.compute_start_ns, [0, 116, 0])
    # one late step: the stall is its arrival plus what is left: with steps 4, stages 3 the last step loads at
    # 120 + 9 = 129 (after 125) and arrives at 225: end max(120 + 36, 225 + 9) = 234, stall 94
    np.testing.assert_allclose(forward_tiles(*args, steps=[1, 4, 1], stages=3).stall_ns, [0, 94, 0])


def test_a_streamed_step_waits_for_the_own_previous_store_under_prefetch_by_hand():
    # one CTA, tile 0 computes 10 and stores 1000 bytes at 10 (drained 30); tile 1 (2 steps, 1 stage, compute 10,
    # c = 5) loads at 10 − 10 = 0, before any store: back at 0, but the CTA is busy until 10: compute from 10. Step 1
    # loads at 10 + 5 = 15, after the store at 10: arrives at 30. End = max(10 + 10, 30 + 5) = 35: stall
    # 35 − max(0, 10) − 10 = 15; store 35 → 55.
    f = forward_tiles([0, 0], [0, 1], 1000.0, 10.0, LinkModel(R, 0.0), load_lag_ns=[0.0, -10.0], steps=[1, 2], stages=1)
    _assert_forward(f, [10, 35], [30, 55], [30, 55], [0, 10], [0, 15], 55)


def test_streamed_tiles_with_an_epilogue_by_hand():
    # one CTA, tile 0 computes 20 + epilogue 5: store at 25 (1000 bytes, drained 45). Tile 1 (2 steps, 1 stage,
    # compute 20 = 2 × 10, epilogue 5) loads at 25 and waits: back 45. Step 1 loads at 55, after every store: it
    # arrives at 55, the compute ends at max(45 + 20, 55 + 10) = 65: stall 65 − 25 − 20 = 20, store at 70 → 90.
    f = forward_tiles([0, 0], [0, 1], 1000.0, 20.0, LinkModel(R, 0.0), epilogue_ns=5.0, steps=[1, 2], stages=1)
    _assert_forward(f, [25, 70], [45, 90], [45, 90], [0, 45], [0, 20], 90)


# ---------------------------------------------------------------- forward_launch: the buffer wait and Eq. 48


def _one_cta_with_a_slow_issue_floor(nbytes, cover_tiles):
    # one CTA, 4 tiles: compute 10, epilogue 5, λ = 0, Q = 0, T_iss^0 = 30: a store is accepted 30 ns after its issue
    return forward_launch([0, 0, 0, 0], [0, 1, 2, 3], nbytes, 10.0, LinkModel(R, 0.0, issue_floor_ns=30.0), epilogue_ns=5.0,
                          cover_tiles=cover_tiles)


def test_the_buffer_wait_is_the_acceptance_beyond_the_covering_compute_end_by_hand():
    # 100 bytes a tile (2 ns). Tile 0: compute 0..10, store 15, drained 17, accepted max(45, 17) = 45. Tile 1: loads
    # at 15 back at 17, compute 17..27 (load stall 2), store 32, accepted 62. Tile 2: 34..44, store 49, accepted 79.
    # Tile 3: 51..61, store 66, accepted 96.
    # cover 1 (the next tile's compute covers the store): waits 45 − 27, 62 − 44, 79 − 61 = 18 each, tile 3 none.
    f, stall = _one_cta_with_a_slow_issue_floor(100.0, 1)
    np.testing.assert_allclose(f.accept_ns, [45, 62, 79, 96])
    np.testing.assert_allclose(stall, [0 + 18, 2 + 18, 2 + 18, 2])
    # cover 2: against the compute end two tiles later: 45 − 44 = 1, 62 − 61 = 1, then none
    np.testing.assert_allclose(_one_cta_with_a_slow_issue_floor(100.0, 2)[1], [1, 2 + 1, 2, 2])
    # cover 3: tile 0's store is accepted (45) before tile 3's compute ends (61): no wait
    np.testing.assert_allclose(_one_cta_with_a_slow_issue_floor(100.0, 3)[1], [0, 2, 2, 2])
    # 1 byte a tile (0.02 ns): tile n's compute starts 0.02 ns after its loads; accepted 30 ns after each issue:
    # 45 − 25.02, 60.02 − 40.04, 75.04 − 55.06 = 19.98 each
    np.testing.assert_allclose(_one_cta_with_a_slow_issue_floor(1.0, 1)[1], [19.98, 20, 20, 0.02])
    # cover 0: no buffer wait, the load stalls alone
    np.testing.assert_allclose(_one_cta_with_a_slow_issue_floor(100.0, 0)[1], [0, 2, 2, 2])


def test_a_tile_that_stores_nothing_has_no_buffer_wait_by_hand():
    # as above with tile 1 storing 0 bytes: its store at 32 drains at once, tile 2's loads at 32 do not wait:
    # compute 32..42, store 47 → 49, accepted 77; tile 3: loads at 47, back 49, compute 49..59.
    # cover 1: tile 0 45 − 27 = 18; tile 1 stores nothing: 0 (its acceptance 62 would be 20 past tile 2's end);
    # tile 2: 77 − 59 = 18; tile 3 none.
    f, stall = _one_cta_with_a_slow_issue_floor([100.0, 0.0, 100.0, 100.0], 1)
    np.testing.assert_allclose(f.compute_start_ns, [0, 17, 32, 49])
    np.testing.assert_allclose(stall, [18, 2, 0 + 18, 2])


def test_the_buffer_wait_stays_within_each_cta_in_any_row_order_by_hand():
    # two CTAs of 2 tiles, compute 10, epilogue 5, 100 bytes, T_iss^0 = 30. Both tile 0s store at 15 (drained 17, 19),
    # accepted 45; both tile 1s' loads at 15 wait for both: back 19, compute 19..29 (stall 4), store 34, accepted 64.
    # cover 1: tile 0 waits 45 − 29 = 16; tile 1 has no later tile in its CTA (never the other CTA's): 0.
    cta, pos = [1, 0, 1, 0], [1, 1, 0, 0]
    f, stall = forward_launch(cta, pos, 100.0, 10.0, LinkModel(R, 0.0, issue_floor_ns=30.0), epilogue_ns=5.0, cover_tiles=1)
    np.testing.assert_allclose(stall, [4, 4, 16, 16])


def test_plain_stores_wait_for_their_whole_round_at_any_positions_by_hand():
    # Eq. 48. Two CTAs at positions 3 and 8, compute 10, 1000 bytes (20 ns), λ = 0, Q = 0; CTA 1's second tile stores
    # nothing. Round 0: both stores at 10, drained 30 and 50; both tile 1s' loads (at 10) return at 50: load stall 40,
    # compute 50..60, stores at 60, drained 80 and 80 (0 bytes). Plain-store waits: round 0 drained at 50: 50 − 10 = 40
    # each; round 1 at 80: CTA 0's 80 − 60 = 20, CTA 1's stores nothing: 0.
    cta, pos, nbytes = [0, 0, 1, 1], [3, 8, 3, 8], [1000.0, 1000.0, 1000.0, 0.0]
    f, stall = forward_launch(cta, pos, nbytes, 10.0, LinkModel(R, 0.0), plain_store=True)
    np.testing.assert_allclose(f.drained_ns, [30, 80, 50, 80])
    np.testing.assert_allclose(stall, [40, 40 + 20, 40, 40 + 0])
    np.testing.assert_allclose(forward_launch(cta, pos, nbytes, 10.0, LinkModel(R, 0.0))[1], [0, 40, 0, 40])
    # one CTA, one tile of 1 byte: its round drains 0.02 ns after the issue
    np.testing.assert_allclose(forward_launch([0], [0], 1.0, 10.0, LinkModel(R, 0.0), plain_store=True)[1], [0.02])


def test_forward_launch_passes_its_structure_to_the_recurrence():
    # forward_launch's prediction is forward_tiles' with the same epilogue, steps, stages and lag (the streamed case
    # above: stall 105 with 2 stages, 115 with 1, 20 with 4; the negative lag: 8 on tile 2)
    args = ([0, 0, 1], [0, 1, 0], [1000.0, 1000.0, 5000.0], [100.0, 40.0, 125.0], LinkModel(R, 0.0))
    for stages, want in ((2, 105.0), (1, 115.0), (None, 20.0)):
        np.testing.assert_allclose(forward_launch(*args, steps=[1, 4, 1], stages=stages)[1], [0, want, 0])
    np.testing.assert_allclose(forward_launch(*args, stages=1)[1], [0, 20, 0])  # one step by default
    f, stall = forward_launch([0, 0, 0], [0, 1, 2], 1000.0, 10.0, LinkModel(R, 0.0, load_latency_ns=2.0), load_lag_ns=[0.0, -6.0, -6.0])
    np.testing.assert_allclose(stall, [0, 0, 8])
    f, stall = forward_launch([0, 0], [0, 1], 1000.0, [100.0, 50.0], LinkModel(R, 500.0, issue_floor_ns=3.0), epilogue_ns=[5.0, 7.0])
    np.testing.assert_allclose(f.store_issue_ns, [105, 182])


# ---------------------------------------------------------------- against a sequential reference


def _reference(cta, pos, nbytes, compute, epi, m: LinkModel, lag, load_issue):
    """§11 one tile at a time (w = 0, one load step, loads served at once): the pending CTA whose loads are issued
    first is resolved next (no store it waits for can still be unknown: every later store is issued after it), a
    load returns at max(ℓ + λ, F(ℓ)), F(ℓ) the FIFO drain of the last store issued at or before ℓ."""
    stores = []  # [issue, bytes, tile]

    def drains():
        f, out = 0.0, {}
        for s, b, i in sorted(stores, key=lambda x: x[0]):  # stable: equal issue times in insertion order
            f = max(f, s) + b / m.rate_gbps
            out[i] = (s, f)
        return out

    def accepted(i):
        s, f = drains()[i]
        return max(s + m.issue_floor_ns, f - m.capacity_bytes / m.rate_gbps)

    seq = {c: [i for i in sorted(range(len(cta)), key=lambda i: pos[i]) if cta[i] == c] for c in sorted(set(cta))}
    start, stall, nxt, prev = {}, {}, {}, {}
    for c, tiles in seq.items():
        t0 = tiles[0]
        start[t0], stall[t0] = 0.0, 0.0
        stores.append([compute[t0] + epi[t0], nbytes[t0], t0])
        nxt[c], prev[c] = 1, t0
    while any(nxt[c] < len(seq[c]) for c in seq):
        issue = {i: s for s, _, i in stores}
        at = {c: (accepted(prev[c]) if load_issue == "accept" else issue[prev[c]]) + lag[seq[c][nxt[c]]]
              for c in seq if nxt[c] < len(seq[c])}
        c = min(at, key=lambda k: (at[k], k))
        ell, i, d = at[c], seq[c][nxt[c]], drains()
        before = [f for s, f in d.values() if s <= ell]
        back = max(ell + m.load_latency_ns, max(before, default=-np.inf), issue[prev[c]] + m.load_latency_ns)
        start[i] = back - m.load_latency_ns
        end = start[i] + compute[i]
        stall[i] = end - max(ell, issue[prev[c]]) - compute[i]
        stores.append([end + epi[i], nbytes[i], i])
        nxt[c], prev[c] = nxt[c] + 1, i
    d = drains()
    n = len(cta)
    return (np.array([d[i][0] for i in range(n)]), np.array([accepted(i) for i in range(n)]), np.array([d[i][1] for i in range(n)]),
            np.array([start[i] for i in range(n)]), np.array([stall[i] for i in range(n)]), max(f for _, f in d.values()))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("load_issue", ["issue", "accept"])
def test_random_launches_match_the_sequential_reference(seed, load_issue):
    # 2–4 CTAs of 1–4 tiles each, rows shuffled, integer-valued times (exact in float64)
    rng = np.random.default_rng(seed)
    per = rng.integers(1, 5, rng.integers(2, 5))
    cta = np.repeat(np.arange(len(per)) * 3 + 1, per)
    pos = np.concatenate([np.sort(rng.choice(20, k, replace=False)) for k in per])
    perm = rng.permutation(len(cta))
    cta, pos = cta[perm], pos[perm]
    n = len(cta)
    nbytes = rng.integers(0, 4, n) * 500.0
    compute = rng.integers(1, 9, n) * 10.0
    epi = rng.integers(0, 3, n) * 5.0
    lag = rng.integers(0, 3, n) * 7.0
    m = LinkModel(R, float(rng.integers(0, 3) * 500), load_latency_ns=float(rng.integers(0, 2) * 4),
                  issue_floor_ns=float(rng.integers(0, 3) * 10))
    f = forward_tiles(cta, pos, nbytes, compute, m, epilogue_ns=epi, load_issue=load_issue, load_lag_ns=lag)
    _assert_forward(f, *_reference(list(cta), list(pos), nbytes, compute, epi, m, lag, load_issue))


def test_a_store_issued_at_the_instant_of_another_ctas_loads_goes_first_however_the_batches_fall_by_hand():
    # §11: a load waits for every store issued at or before it (as both CTAs' loads wait for both stores of a round
    # issued together). CTA 0: tile 0 computes 100 and stores nothing (at 100), tile 1's loads at 100 return at once,
    # it computes 100..150 and stores 1000 bytes at 150 (150 → 170). CTA 1: tile 0 computes 150 and stores nothing at
    # 150; its tile 1's loads at 150 wait for CTA 0's store issued at that instant: back at 170, compute 170..180,
    # stall 20 — although that store is not yet known when CTA 1's loads come up (150 = CTA 0's 100 + 50).
    f = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], [0.0, 1000.0, 0.0, 0.0], [100.0, 50.0, 150.0, 10.0], LinkModel(R, 0.0))
    _assert_forward(f, [100, 150, 150, 180], [100, 170, 150, 180], [100, 170, 150, 180], [0, 100, 0, 170], [0, 0, 0, 20], 180)


def test_a_streamed_step_loaded_at_the_instant_of_another_ctas_store_waits_for_it_by_hand():
    # CTA 0: tile 0 computes 100, stores nothing at 100; tile 1 (2 steps, 1 stage, compute 20: c = 10) loads step 0 at
    # 100 (back at once) and step 1 at 110. CTA 1: tile 0 computes 60, stores nothing; tile 1 computes 60..110 and
    # stores 1000 bytes at 110 (110 → 130). Step 1, loaded at that instant, waits for it: arrives 130, the compute
    # ends at max(100 + 20, 130 + 10) = 140, stall 140 − 100 − 20 = 20 (not 0: the store is not yet known when CTA 0's
    # tile comes up).
    f = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], [0.0, 0.0, 0.0, 1000.0], [100.0, 20.0, 60.0, 50.0], LinkModel(R, 0.0),
                      steps=[1, 2, 1, 1], stages=1)
    np.testing.assert_allclose(f.stall_ns, [0, 20, 0, 0])
    np.testing.assert_allclose(f.store_issue_ns, [100, 140, 60, 110])


def test_a_window_never_lets_a_load_see_past_a_store_not_yet_known_by_hand():
    # the case above with w = 5: CTA 1's tile 0 computes 145 (store at 145), its loads at 145 wait for every store
    # up to 150, CTA 0's at 150 too (150 → 170): back 170, compute 170..180, stall 25. CTA 0's loads at 100 see its
    # own (empty) store only.
    f = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], [0.0, 1000.0, 0.0, 0.0], [100.0, 50.0, 145.0, 10.0], LinkModel(R, 0.0, window_ns=5.0))
    _assert_forward(f, [100, 150, 145, 180], [100, 170, 145, 180], [100, 170, 145, 180], [0, 100, 0, 170], [0, 0, 0, 25], 180)


def test_streamed_steps_of_one_stage_each_wait_one_load_latency_by_hand():
    # one CTA, λ = 4: tile 0 computes 24, stores 1000 bytes at 24 (drained 44). Tile 1: 2 steps, 1 stage, compute 24
    # (c = (24 − 4)/2 = 10): its loads at 24 return at 44 (compute start 40); step 1 loads at 44 + 10 = 54, after the
    # drain, and arrives λ later, 58: end max(44 + 20, 58 + 10) = 68, stall 68 − 24 − 24 = 20; store 68 → 88.
    f = forward_tiles([0, 0], [0, 1], 1000.0, 24.0, LinkModel(R, 0.0, load_latency_ns=4.0), steps=[1, 2], stages=1)
    _assert_forward(f, [24, 68], [44, 88], [44, 88], [0, 40], [0, 20], 88)


def test_streamed_tiles_of_different_step_counts_in_one_pass_by_hand():
    # λ = 0. CTA 0 and CTA 1: tile 0 computes 10 and stores nothing at 10. CTA 0's tile 1: 2 steps, 1 stage, compute 20
    # (c = 10); CTA 1's: 4 steps, 3 stages, compute 40 (c = 10). CTA 2 stores 1000 bytes at 25 (25 → 45).
    # Both tile 1s load at 10 and start at once. CTA 0's step 1 loads at 20 (before CTA 2's store): end
    # max(10 + 20, 20 + 10) = 30, no stall (a third step, loaded at 30 behind CTA 2's store, does not exist).
    # CTA 1's step 3 loads at 20: end max(10 + 40, 20 + 10) = 50, no stall. Stores at 30 and 50.
    f = forward_tiles([0, 0, 1, 1, 2], [0, 1, 0, 1, 0], [0.0, 0.0, 0.0, 0.0, 1000.0], [10.0, 20.0, 10.0, 40.0, 25.0],
                      LinkModel(R, 0.0), steps=[1, 2, 1, 4, 1], stages=[1, 1, 1, 3, 1])
    np.testing.assert_allclose(f.stall_ns, 0.0)
    np.testing.assert_allclose(f.store_issue_ns, [10, 30, 10, 50, 25])
    assert f.kernel_ns == pytest.approx(50.0)


def test_a_compute_gap_under_a_nanosecond_streams_in_fractions_by_hand():
    # one CTA, tile 0 computes 10 and stores nothing; tile 1: 2 steps, 1 stage, compute 0.5 (c = 0.25): step 1 loads at
    # 10.25 and the compute ends at max(10 + 0.5, 10.25 + 0.25) = 10.5 (store issue)
    f = forward_tiles([0, 0], [0, 1], 0.0, [10.0, 0.5], LinkModel(R, 0.0), steps=[1, 2], stages=1)
    np.testing.assert_allclose(f.store_issue_ns, [10, 10.5])
    # and a first tile that ends within the first nanosecond: the next one's loads at 0.5 start it at once
    g = forward_tiles([0, 0], [0, 1], 0.0, [0.5, 10.0], LinkModel(R, 0.0, load_rate_gbps=10.0))
    np.testing.assert_allclose(g.compute_start_ns, [0, 0.5])


def test_integer_compute_and_epilogue_keep_fractional_times_by_hand():
    # one CTA, compute 100 and 50 ns, epilogue 0 (Python ints), 1000 bytes at 16 B/ns = 62.5 ns: tile 0's store at 100
    # drains at 162.5, tile 1 computes 162.5..212.5 and stores at 212.5 (→ 275)
    f = forward_tiles([0, 0], [0, 1], 1000, [100, 50], LinkModel(16.0, 0.0), epilogue_ns=[0, 0])
    np.testing.assert_allclose(f.store_issue_ns, [100, 212.5])
    assert f.kernel_ns == 275.0


def test_a_streamed_tile_resolved_with_the_batch_keeps_its_place_at_the_load_server_by_hand():
    # load rate 10 B/ns, λ = 0. CTA 0: tile 0 computes 100 and stores 1000 bytes at 100 (drained 120); tile 1 has 2
    # steps, 1 stage, 40 ns (c = 20) and loads 100 bytes. CTA 1: tile 0 computes 100, stores nothing (FIFO behind
    # CTA 0's: drained 120); tile 1: one step, 40 ns, 100 bytes. Both tile 1s' loads (at 100) are released at 120
    # and served in CTA order: CTA 0's 120..130, CTA 1's 130..140. CTA 0's step 1 loads at 150 (no store after 100
    # by then): end max(130 + 40, 150 + 20) = 170, stall 170 − 100 − 40 = 30; CTA 1: 140..180, stall 40.
    # CTA 2: tile 0 computes 160 and stores nothing; tile 1 (10 ns) loads at 160: compute 160..170, no stall.
    m = LinkModel(R, 0.0, load_rate_gbps=10.0)
    f = forward_tiles([0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 0, 1], [1000.0, 0.0, 0.0, 0.0, 0.0, 0.0], [100.0, 40.0, 100.0, 40.0, 160.0, 10.0], m,
                      load_bytes=[0.0, 100.0, 0.0, 100.0, 0.0, 0.0], steps=[1, 2, 1, 1, 1, 1], stages=1)
    np.testing.assert_allclose(f.compute_start_ns, [0, 130, 0, 140, 0, 160])
    np.testing.assert_allclose(f.stall_ns, [0, 30, 0, 40, 0, 0])


def test_a_streamed_step_waits_for_a_store_of_the_same_pass_by_hand():
    # λ = 2. CTA 0: tile 0 computes 100, stores nothing at 100; tile 1 (2 steps, 1 stage, compute 20: c = 9) loads at
    # 100, back at 102 (start 100); step 1 loads at 111. CTA 1: tile 0 computes 60, stores nothing; tile 1 loads at
    # 60, computes 60..110 and stores 1000 bytes at 110 (110 → 130), before step 1's loads: they arrive at 130,
    # the compute ends at max(102 + 18, 130 + 9) = 139: stall 139 − 100 − 20 = 19.
    f = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], [0.0, 0.0, 0.0, 1000.0], [100.0, 20.0, 60.0, 50.0], LinkModel(R, 0.0, load_latency_ns=2.0),
                      steps=[1, 2, 1, 1], stages=1)
    np.testing.assert_allclose(f.stall_ns, [0, 19, 0, 0])
    np.testing.assert_allclose(f.store_issue_ns, [100, 139, 60, 110])


def test_forty_ctas_drain_and_load_in_issue_order_then_cta_order():
    # 40 CTAs: odd ones compute 50, even ones 100, then one tile of 100 ns that loads 100 bytes at 10 B/ns; 1000-byte
    # stores (20 ns). Tile 0s: the 20 odd stores at 50 drain 50 + 20(i + 1) (i-th odd CTA, in CTA order), the even ones
    # at 100 behind them, 450 + 20(i + 1). Tile 1s: odd loads (at 50) are released at 450, even ones (at 100) at 850,
    # each served 10 ns after the one before it, in CTA order: starts 450 + 10(i + 1) and 850 + 10(i + 1).
    k = np.arange(40)
    odd, i = k % 2 == 1, k // 2
    cta, pos = np.repeat(k, 2), np.tile([0, 1], 40)
    compute = np.where(pos == 0, np.where(np.repeat(odd, 2), 50.0, 100.0), 100.0)
    f = forward_tiles(cta, pos, 1000.0, compute, LinkModel(R, 0.0, load_rate_gbps=10.0), load_bytes=np.where(pos == 1, 100.0, 0.0))
    np.testing.assert_allclose(f.drained_ns[pos == 0], np.where(odd, 50.0, 450.0) + 20.0 * (i + 1))
    np.testing.assert_allclose(f.compute_start_ns[pos == 1], np.where(odd, 450.0, 850.0) + 10.0 * (i + 1))


def test_the_row_search_of_several_launches_equals_a_search_of_each_row_where_times_share_keys():
    """forward._rows_searchsorted against np.searchsorted on each row, on times a few ulps apart (three rows: the
    keys drop the times' two lowest bits, so the four doubles g + 0 … g + 3 of a group share a key): full rows whose
    last values share a key with queries beside them, a first value alone in its key with a smaller query of that key,
    queries at, between and beyond every value."""
    from xstage_trace.analysis.forward import _row_keys, _rows_searchsorted

    g = np.float64(1000.0).view(np.int64) & ~np.int64(3)  # a key group's first bit pattern

    def at(*offsets):
        return (g + np.array(offsets, np.int64)).view(np.float64)

    width = 6
    rows = np.full((3, width), np.inf)
    rows[0] = at(2, 4, 12, 13, 14, 15)  # its first value alone in its key (g + 2, a smaller query g + 1), a whole key last
    rows[1, :1] = at(6)
    rows[2] = at(0, 4, 6, 8, 9, 11)  # full, its last values sharing a key with queries between and after them
    lengths = np.array([6, 1, 6])
    keys = _row_keys(rows, np.arange(3)[:, None], 2)
    queries = np.concatenate((at(*range(-1, 17)), [2000.0]))
    row = np.repeat(np.arange(3), len(queries))
    values = np.tile(queries, 3)
    got = _rows_searchsorted(rows, keys, lengths, row, values, 2)
    want = np.concatenate([np.searchsorted(rows[r, :lengths[r]], queries, side="right") for r in range(3)])
    np.testing.assert_array_equal(got, want)
    # the same as one 2-D query block
    np.testing.assert_array_equal(_rows_searchsorted(rows, keys, lengths, row.reshape(3, -1), values.reshape(3, -1), 2), want.reshape(3, -1))
