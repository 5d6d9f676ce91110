"""The docs/model.md equations (analysis/burst_gap.py, recurrence.py, whatif.py, partition.py, timing.py)
on small hand-made inputs whose answers are worked out by hand in the comments, at the boundaries the
equations draw (equal to a bound counts as within it) (docs/mutation.md: written against the mutants
the paper-number tests of test_model.py let through)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis import burst_gap as bg
from xstage_trace.analysis.partition import (RHO_REF, PartitionProblem, choose_comm_ctas, completion_columns, scaled_rho,
                                             work_tiles)
from xstage_trace.analysis.recurrence import SCAN_BLOCK, audit_sequence, backlog_bytes, stalled_trajectory
from xstage_trace.analysis.timing import max_across_ranks_median
from xstage_trace.analysis.whatif import interleave, interleave_speedup, qloop_audit

# ---------------------------------------------------------------- §2–§4 burst-gap law and design test

RATE_BOUND = "rate bound V/(T_iss^0+G) > R"
CAPACITY_BOUND = "capacity bound [V - R*T_iss^0]+ > Q"


def test_design_test_at_both_bounds_exactly_is_piggyback():
    # V = 2000 B, T0 = 500 ns, G = 500 ns, R = 2 B/ns: V/(T0 + G) = 2 = R (Eq. 17 holds with equality);
    # b^iso = 2000 − 2·500 = 1000 B = Q (Eq. 18 holds with equality)
    assert bg.design_verdict(2000.0, 500.0, 2.0, 500.0, 1000.0) == ("piggyback", [])


def test_design_test_names_each_failed_bound():
    # G = 0: V/T0 = 4 > R = 2; Q = 999 < b^iso = 1000
    assert bg.design_verdict(2000.0, 0.0, 2.0, 500.0, 999.0) == ("reshape", [RATE_BOUND, CAPACITY_BOUND])
    assert bg.design_verdict(2000.0, 500.0, 2.0, 500.0, 999.0) == ("reshape", [CAPACITY_BOUND])
    assert bg.design_verdict(2000.0, 0.0, 2.0, 500.0, 1000.0) == ("reshape", [RATE_BOUND])


def test_design_test_without_a_capacity_checks_the_rate_bound_only():
    assert bg.design_verdict(2000.0, 500.0, 2.0, 500.0, None) == ("piggyback", [])
    assert bg.design_verdict(2000.0, 0.0, 2.0, 500.0, None) == ("reshape", [RATE_BOUND])


def test_capacity_from_a_knee_in_whole_bytes_is_a_float():
    # Eq. 9 on integers: Q = 5000 − 2·1000 = 3000 B, as float64 like every other volume
    q = bg.capacity_from_knee_bytes(5000, 2, 1000)
    assert q == 3000.0 and q.dtype == np.float64


# ---------------------------------------------------------------- §4 backlog recurrence, audit, stalled trajectory

def test_an_unbounded_gap_drains_the_queue_before_later_bursts():
    # Eq. 12 with Δb = (5, −∞, 3, 2): q = (0, 5, [5 − ∞]₊ = 0, 0 + 3 = 3)
    assert backlog_bytes([5.0, -np.inf, 3.0, 2.0]).tolist() == [0.0, 5.0, 0.0, 3.0]
    # the backlog before the drain (5) is every byte the sequence built: it must still drain to 0
    assert backlog_bytes([5.0, -np.inf, 0.0]).tolist() == [0.0, 5.0, 0.0]


def _audit_by_hand(capacity):
    # V = 2000 B each, G = (500, 800, ∞), T0 = 500 ns, R = 1 B/ns: Δb = (1000, 700, −∞), q = (0, 1000, 1700),
    # b^iso = 2000 − 500 = 1500 B per burst
    return audit_sequence([2000, 2000, 2000], [500, 800, np.inf], 500, 1.0, capacity)


def test_audit_onset_and_excess_by_hand():
    # Q = 1500: q + b^iso = (1500, 2500, 3200): the guard (Eq. 14) first fails at burst 1, by 2500 − 1500 = 1000 B
    a = _audit_by_hand(1500.0)
    assert a.table["guard_ok"].tolist() == [True, False, False]
    assert (a.onset, a.onset_excess_bytes) == (1, 1000.0)
    # Q per burst (1500, 3000, 3000): bursts 0 and 1 fit, burst 2 exceeds by 3200 − 3000 = 200 B
    a = _audit_by_hand(np.array([1500.0, 3000.0, 3000.0]))
    assert a.table["guard_ok"].tolist() == [True, True, False]
    assert (a.onset, a.onset_excess_bytes) == (2, 200.0)


def test_audit_without_backpressure_has_no_onset():
    for capacity in (None, 5000.0):
        a = _audit_by_hand(capacity)
        assert a.table["guard_ok"].all() and a.onset is None and a.onset_excess_bytes is None


def test_audit_table_of_integer_inputs_is_in_float_columns():
    a = _audit_by_hand(1500)
    assert list(a.table.columns) == ["volume_bytes", "gap_ns", "issue_floor_ns", "rho", "delta_b_bytes", "q_bytes",
                                     "b_iso_bytes", "guard_ok"]
    assert a.table[["volume_bytes", "issue_floor_ns"]].values.tolist() == [[2000.0, 500.0]] * 3
    assert (a.table.dtypes.drop("guard_ok") == np.float64).all()
    whole = audit_sequence([2000, 2000], [500, 800], 500, 1, 1500)  # every argument an integer
    assert whole.table["gap_ns"].tolist() == [500.0, 800.0] and (whole.table.dtypes.drop("guard_ok") == np.float64).all()


def test_stalled_trajectory_by_hand():
    # R = 1 B/ns, Q = 1000 B, T0 = 100 ns, V = (1500, 500, 200), G = (300, 100, 1000), no loop overhead (Eq. 15, 16):
    # n = 0: T = max(100, 0 + 1500 − 1000) = 500, q₁ = [1500 − (500 + 300)]₊ = 700
    # n = 1: T = max(100, 700 + 500 − 1000) = 200, q₂ = [700 + 500 − (200 + 100)]₊ = 900
    # n = 2: T = max(100, 900 + 200 − 1000) = 100, q₃ = [900 + 200 − (100 + 1000)]₊ = 0
    t = stalled_trajectory([1500.0, 500.0, 200.0], [300.0, 100.0, 1000.0], 100.0, 1.0, 1000.0)
    assert t.to_dict("list") == {"q_bytes": [0.0, 700.0, 900.0], "issue_ns": [500.0, 200.0, 100.0],
                                 "issue_overhead_ns": [400.0, 100.0, 0.0], "period_ns": [800.0, 300.0, 1100.0],
                                 "q_after_bytes": [700.0, 900.0, 0.0]}
    # o = 50: T = 500, q₁ = [1500 − 850]₊ = 650; T = max(100, 150) = 150, q₂ = [1150 − 300]₊ = 850;
    # T = max(100, 50) = 100, q₃ = [1050 − 1150]₊ = 0; periods T + G + o = (850, 300, 1150)
    t = stalled_trajectory([1500.0, 500.0, 200.0], [300.0, 100.0, 1000.0], 100.0, 1.0, 1000.0, 50.0)
    assert t["q_after_bytes"].tolist() == [650.0, 850.0, 0.0] and t["issue_ns"].tolist() == [500.0, 150.0, 100.0]
    assert t["period_ns"].tolist() == [850.0, 300.0, 1150.0]


def test_stalled_trajectory_over_several_scan_blocks_matches_its_recursion():
    # 3 blocks of SCAN_BLOCK maps and part of a fourth; phases of 900 bursts that fill the path (mean
    # Δ = 1500 − (100 + 1340 + 20) = +40 B) and drain it (−200 B): the queue enters each later block at another level
    rng = np.random.default_rng(5)
    n = 3 * SCAN_BLOCK + 100
    phase = (np.arange(n) // 900) % 2
    v = rng.uniform(0, 3000, n)
    g = rng.uniform(0, 2680, n) + 240 * phase
    t0, rate, cap, o = 100.0, 1.0, 10000.0, 20.0
    t = stalled_trajectory(v, g, t0, rate, cap, o)
    q, qs, ts = 0.0, [], []
    for i in range(n):  # Eq. 15 and 16, one burst at a time
        qs.append(q)
        ts.append(max(t0, (q + v[i] - cap) / rate))
        q = max(q + v[i] - rate * (ts[-1] + g[i] + o), 0.0)
    np.testing.assert_allclose(t["q_bytes"], qs, rtol=0, atol=1e-6)
    np.testing.assert_allclose(t["issue_ns"], ts, rtol=0, atol=1e-6)
    entering = np.array(qs)[SCAN_BLOCK::SCAN_BLOCK]  # the queue as each later block starts
    assert len(np.unique(entering)) == 3 and (entering > 0).all()
    assert (np.array(ts) > t0).sum() > 100 and (np.array(qs) == 0).sum() > 100  # both clamps act


def test_stalled_trajectory_that_never_empties_nor_fills_carries_the_queue_across_scan_blocks():
    # Q = 10⁶ B, R = 1 B/ns, T0 = 100 ns, o = 0. Burst 0: V = 1100, G = 0 → a = 1000; burst 1: V = 995000,
    # G = 900000 → a = 94900 with the small bound c = Q − G = 10⁵ (q = 1000 + 94900 = 95900 stays under it);
    # then V = 240 ± 20, G = 100 → a = 40 ± 20 B. The queue only grows and stays under Q − R·(G + o) and
    # Q + R·T0 − V, so no clamp acts: q_{n+1} = q_n + a_n exactly (integers), T = T0 throughout
    rng = np.random.default_rng(3)
    n = 3 * SCAN_BLOCK + 100
    v = 240.0 + rng.integers(-20, 21, n)
    g = np.full(n, 100.0)
    v[:2], g[:2] = (1100.0, 995000.0), (0.0, 900000.0)
    t = stalled_trajectory(v, g, 100.0, 1.0, 1e6)
    a = v - (100.0 + g)
    assert t["q_after_bytes"].tolist() == np.cumsum(a).tolist()
    assert t["q_bytes"].tolist() == [0.0] + np.cumsum(a)[:-1].tolist()
    assert (t["issue_ns"] == 100.0).all()


# ---------------------------------------------------------------- §6 interleaving what-if

def test_interleave_with_two_linear2_tiles_per_linear1_tile_by_hand():
    # V/R = 10000 ns, G_wave = T_L2 = 2000, T0 = 1000: ΔT_wave = 10000 − 2000 − 1000 = 7000 (Eq. 21);
    # n1/n2 = 1/2, T_L1 = 6000: G_int = 2000 + 3000 = 5000 (Eq. 22), ΔT_int = 7000 − 3000 = 4000 (Eq. 23);
    # offered rate 2·10000 / (2·(1000 + 2000) + 1·6000) = 20000/12000 B/ns > R = 1: no full recovery (Eq. 24)
    d = interleave(10000.0, 6000.0, 2000.0, 1, 2, 1000.0, 1.0)
    assert d == {"gap_wave_ns": 2000.0, "issue_overhead_wave_ns": 7000.0, "gap_interleaved_ns": 5000.0,
                 "issue_overhead_interleaved_ns": 4000.0, "offered_rate_interleaved_gbps": pytest.approx(20000 / 12000),
                 "full_recovery": False, "d_knee_rows": None}


def test_interleave_of_a_burst_the_wave_gap_already_covers_has_no_overhead():
    # V/R = 1000 ns < G_wave + T0 = 3000: ΔT_wave = [1000 − 2000 − 1000]₊ = 0, and ΔT_int = 0
    d = interleave(1000.0, 6000.0, 2000.0, 1, 2, 1000.0, 1.0)
    assert d["issue_overhead_wave_ns"] == 0.0 and d["issue_overhead_interleaved_ns"] == 0.0


def test_interleave_offered_rate_equal_to_the_drain_rate_recovers_fully():
    # n1 = n2 = 1: 12000 / ((1000 + 2000) + 9000) = 1.0 B/ns = R, Eq. 24 holds with equality
    d = interleave(12000.0, 9000.0, 2000.0, 1, 1, 1000.0, 1.0)
    assert d["offered_rate_interleaved_gbps"] == 1.0 and d["full_recovery"] is True


def test_interleave_knee_needs_all_three_shape_arguments():
    # Eq. 25: D_knee = ⌈128·148 / (2·2048)⌉ = ⌈4.625⌉ = 5; without any one of b_n, K_SM, h_inter: none
    assert interleave(1000.0, 6000.0, 2000.0, 1, 2, 1000.0, 1.0, 128, 148, 2048)["d_knee_rows"] == 5
    for args in ((None, 148, 2048), (128, None, 2048), (128, 148, None)):
        assert interleave(1000.0, 6000.0, 2000.0, 1, 2, 1000.0, 1.0, *args)["d_knee_rows"] is None


def test_interleave_speedup_by_hand():
    # the case above (ΔT_wave = 7000, ΔT_int = 4000 per Linear-2 tile), 4 Linear-2 tiles per CTA, a 100 µs wave run:
    # saved 4·3000 = 12000 ns, T_int = 88000 ns, speedup 100000/88000 = 25/22
    d = interleave_speedup(100000.0, 4, 10000.0, 6000.0, 2000.0, 1, 2, 1000.0, 1.0)
    assert d == {"gap_wave_ns": 2000.0, "issue_overhead_wave_ns": 7000.0, "gap_interleaved_ns": 5000.0,
                 "issue_overhead_interleaved_ns": 4000.0, "offered_rate_interleaved_gbps": pytest.approx(20000 / 12000),
                 "full_recovery": False, "d_knee_rows": None, "saved_ns": 12000.0, "interleaved_kernel_ns": 88000.0,
                 "speedup": pytest.approx(25 / 22)}


# ---------------------------------------------------------------- §7 Q-loop piggyback audit

def test_qloop_audit_at_the_recovery_gap_and_the_capacity_exactly_is_piggyback():
    # B_t = 1·1000·1 = 1000 B, K = 2: V = 2000 B; R = 1, T0 = 1000: V/R = 2000, G* = 1000 ns (Eq. 4),
    # b^iso = 2000 − 1000 = 1000 B = Q; σ = 500, b_n = 128: M_ub* = 128·⌈1000/500⌉ = 256 (Eq. 28).
    # Q-loop gaps (Eq. 27): M = 256 → 500·2 = 1000 = G*, M = 200 → 500·⌈1.5625⌉ = 1000, M = 100 → 500 < G*
    a = qloop_audit(1, 1000, 1, 128, 500.0, 2, 1.0, 1000.0, 1000.0, [256, 200, 100])
    assert a == {"bytes_per_producer": 1000, "volume_bytes": 2000, "drain_time_ns": 2000.0, "recovery_gap_ns": 1000.0,
                 "isolated_excess_bytes": 1000.0, "capacity_ok": True, "m_ub_tokens": 256,
                 "per_seq_len": [{"seq_len": 256, "qloop_gap_lb_ns": 1000.0, "verdict": "piggyback"},
                                 {"seq_len": 200, "qloop_gap_lb_ns": 1000.0, "verdict": "piggyback"},
                                 {"seq_len": 100, "qloop_gap_lb_ns": 500.0, "verdict": "reshape"}]}
    assert all(type(r["seq_len"]) is int for r in a["per_seq_len"])


def test_qloop_audit_over_the_capacity_is_reshape_whatever_the_gap():
    # Q = 999 B < b^iso = 1000 B: even M = 256, whose gap covers G*, must reshape
    a = qloop_audit(1, 1000, 1, 128, 500.0, 2, 1.0, 1000.0, 999.0, [256])
    assert a["capacity_ok"] is False and a["per_seq_len"][0]["verdict"] == "reshape"


def test_qloop_audit_without_a_capacity_judges_the_gap_only():
    a = qloop_audit(1, 1000, 1, 128, 500.0, 2, 1.0, 1000.0, None, [256, 100])
    assert a["capacity_ok"] is None
    assert [r["verdict"] for r in a["per_seq_len"]] == ["piggyback", "reshape"]


def test_qloop_audit_m_ub_of_a_sub_nanosecond_and_of_a_zero_recovery_gap():
    # T0 = 1999.5: G* = 2000 − 1999.5 = 0.5 ns → M_ub* = 128·⌈0.5/500⌉ = 128; T0 = 3000 ≥ V/R: G* = 0 → M_ub* = 0
    assert qloop_audit(1, 1000, 1, 128, 500.0, 2, 1.0, 1999.5, None, [1])["m_ub_tokens"] == 128
    assert qloop_audit(1, 1000, 1, 128, 500.0, 2, 1.0, 3000.0, None, [1])["m_ub_tokens"] == 0


# ---------------------------------------------------------------- §9 CTA partitioning

def test_scaled_rho_by_hand():
    # Eq. 35 at the reference (K = 352, 128 × 128 tiles, D = 4): ρ_ref; K = 704 (×1/2), T_N = 32 (×4), D = 12 (×3): 6·ρ_ref
    assert scaled_rho(PartitionProblem((256,), 1024, 2048, 352, 2, 4)) == pytest.approx(RHO_REF, rel=1e-15)
    assert scaled_rho(PartitionProblem((256,), 1024, 2048, 704, 2, 12, tile_n=32)) == pytest.approx(6 * RHO_REF, rel=1e-15)
    assert scaled_rho(PartitionProblem((256,), 1024, 2048, 352, 2, 4), rho_ref=2.0) == pytest.approx(2.0, rel=1e-15)


def _small() -> PartitionProblem:
    # 2 experts of 128 tokens, M = 2048, N = 1024, L = 1, D = 4, 4 SMs with one compute and one comm CTA each
    return PartitionProblem((128, 128), 2048, 1024, 352, 1, 4, num_sms=4, comp_per_sm=1, max_comm_ctas=4)


def test_work_tiles_with_two_comm_tiles_across_the_split():
    # N = 4096, L = 2: ⌈N/L⌉ = 2048; W_comp = 4·⌈256/128⌉·⌈2048/128⌉ = 4·2·16 = 128;
    # W_comm = ⌈⌈1024/4⌉/128⌉·⌈2048/1024⌉ = 2·2 = 4
    assert work_tiles(PartitionProblem((256,) * 4, 1024, 4096, 352, 2, 4)) == (128, 4)


def test_completion_columns_by_hand_where_the_last_c_leaves_no_compute_slot():
    # W_comp = 2·⌈128/128⌉·⌈1024/128⌉ = 16, W_comm = ⌈⌈2048/4⌉/128⌉·1 = 4. R(C) = C, P(C) = 4 − C: C = 4 has no
    # compute slot and is not legal; C = 3 with one slot is. ρ = 1, L = 1: T = A_0 + q = ⌈16/P⌉ + ⌈4/C⌉:
    # C = 1: 6 + 4 = 10 (3·6 − 16 = 2 empty), C = 2: 8 + 2 = 10 (0 empty), C = 3: 16 + 2 = 18 (0 empty)
    t = completion_columns(_small(), rho=1.0)
    assert set(t) == {"comm_ctas", "reserved_sms", "compute_slots", "compute_waves", "comm_waves", "split_service",
                      "completion_waves", "empty_slots_last_wave"}
    expected = {"comm_ctas": [1, 2, 3], "reserved_sms": [1, 2, 3], "compute_slots": [3, 2, 1], "compute_waves": [6, 8, 16],
                "comm_waves": [4, 2, 2], "split_service": [4.0, 2.0, 2.0], "completion_waves": [10.0, 10.0, 18.0],
                "empty_slots_last_wave": [2, 0, 0]}
    for k, v in expected.items():
        assert t[k].tolist() == v, k
    assert choose_comm_ctas(t) == 2  # T(1) = T(2): C = 2 leaves fewer empty slots


def test_completion_columns_of_an_integer_rho_are_float64():
    t = completion_columns(_small(), rho=1)
    assert t["split_service"].dtype == np.float64 and t["completion_waves"].dtype == np.float64


def test_completion_columns_default_rho_is_the_scaled_reference():
    # the _small problem is at the reference K, tiles and D: ρ = ρ_ref ≈ 10.05; T(1) = 6 + 4ρ, T(2) = 8 + 2ρ
    t = completion_columns(_small())
    assert t["completion_waves"][:2].tolist() == pytest.approx([6 + 4 * RHO_REF, 8 + 2 * RHO_REF], rel=1e-15)


def test_choose_comm_ctas_takes_a_fraction_of_a_wave_as_a_difference_and_a_billionth_as_a_tie():
    # 12.3 < 12.4 waves: C = 1 wins although it leaves more empty slots
    assert choose_comm_ctas({"completion_waves": [12.3, 12.4], "empty_slots_last_wave": [5, 0], "comm_ctas": [1, 2]}) == 1
    # 12 + 2e-10 and 12 agree to 9 decimals: a tie, broken by the empty slots (C = 1 has none)
    assert choose_comm_ctas({"completion_waves": [12.0 + 2e-10, 12.0], "empty_slots_last_wave": [0, 5],
                             "comm_ctas": [1, 2]}) == 1


# ---------------------------------------------------------------- §10 timing scopes

def test_max_across_ranks_median_by_hand():
    # shape A, kernel_ms per (trial, rank): t0 (1, 3), t1 (5, 2), t2 (4, 4.5): slowest rank per trial 3, 5, 4.5 →
    # median 4.5 (Eq. 36; the median of all six is 3.5, the max of the per-rank medians max(4, 3) = 4).
    # shape B: rank 0 only, 10 and 20 ms → 15. Rows in no particular order.
    rows = [("A", 1, 2, 4.5), ("B", 0, 1, 20.0), ("A", 0, 0, 1.0), ("A", 1, 0, 3.0), ("A", 0, 1, 5.0),
            ("B", 0, 0, 10.0), ("A", 1, 1, 2.0), ("A", 0, 2, 4.0)]
    trials = pd.DataFrame(rows, columns=["shape", "rank", "trial", "kernel_ms"])
    t = max_across_ranks_median(trials, ["shape"]).set_index("shape")
    assert sorted(t.columns) == sorted(["kernel_ms_max_rank_median", "trials", "ranks", "kernel_ms_median_rank0",
                                        "kernel_ms_median_rank1"])
    assert t.loc["A"].tolist() == [4.5, 3, 2, 4.0, 3.0] and t.loc["B", "kernel_ms_max_rank_median"] == 15.0
    assert t.loc["B", ["trials", "ranks", "kernel_ms_median_rank0"]].tolist() == [2, 1, 15.0]
    assert np.isnan(t.loc["B", "kernel_ms_median_rank1"])


def test_max_across_ranks_median_of_another_value_column():
    trials = pd.DataFrame({"shape": ["A"] * 4, "rank": [0, 1, 0, 1], "trial": [0, 0, 1, 1], "span_ns": [1.0, 2.0, 7.0, 3.0]})
    t = max_across_ranks_median(trials, ["shape"], value="span_ns")
    # per trial 2 and 7 → 4.5; rank 0: median(1, 7) = 4, rank 1: median(2, 3) = 2.5
    assert t.to_dict("records") == [{"shape": "A", "span_ns_max_rank_median": 4.5, "trials": 2, "ranks": 2,
                                     "span_ns_median_rank0": 4.0, "span_ns_median_rank1": 2.5}]
