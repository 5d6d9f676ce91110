"""The X-Stage model against the papers' published numbers, plus properties of the recurrence."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xstage_trace.analysis import burst_gap as bg
from xstage_trace.analysis.partition import RHO_REF, PartitionProblem, choose_comm_ctas, completion_times, work_tiles
from xstage_trace.analysis.recurrence import audit_sequence, backlog_bytes, byte_balance, stalled_trajectory
from xstage_trace.analysis.stall_law import table3_row
from xstage_trace.analysis.whatif import interleave, qloop_audit

MIB = 2**20
KIB = 2**10


def test_fa4_audit():
    """docs/model.md §7: K = 148, 32 KiB per producer, R = 717 GB/s, T0 = 0.76 µs, σ = 0.79 µs, b_n = 128."""
    a = qloop_audit(128, 128, 2, 128, 790.0, 148, 717.0, 760.0, 4.25 * MIB, [8192])
    assert a["bytes_per_producer"] == 32 * KIB
    assert a["drain_time_ns"] / 1e3 == pytest.approx(6.76, abs=0.01)
    assert a["recovery_gap_ns"] / 1e3 == pytest.approx(6.0, abs=0.01)
    assert a["isolated_excess_bytes"] / MIB == pytest.approx(4.1, abs=0.01)
    assert a["capacity_ok"] is True
    assert a["m_ub_tokens"] == 1024
    assert a["per_seq_len"][0]["verdict"] == "piggyback"


def test_capacity_from_knee():
    """docs/model.md §3: V_knee ≈ 4.77 MiB, T0 = 0.76 µs, R = 717 GB/s → Q ≈ 4.25 MiB."""
    q = bg.capacity_from_knee_bytes(4.77 * MIB, 717.0, 760.0)
    assert q / MIB == pytest.approx(4.25, abs=0.01)


# Paper Table 3 medians (µs): span wave / interleaved, T^mma L2 / L1, and Δt predictions.
TABLE3 = {
    "DiT-MoE": (9.93, 3.77, 5.30, 9.77, 4.63),
    "Qwen3.5": (9.17, 3.82, 4.24, 14.40, 4.94),
    "Hy3": (9.68, 3.59, 6.09, 10.79, 3.60),
    "MiMo-V2.5": (9.22, 3.94, 7.77, 7.57, 1.45),
    "GLM-5.2": (9.53, 3.63, 7.99, 18.77, 1.54),
    "DSv4-Flash": (9.48, 3.83, 8.01, 7.40, 1.47),
    "DSv4-Pro": (7.88, 3.55, 9.54, 11.57, 0.0),
}


@pytest.mark.parametrize("model", sorted(TABLE3))
def test_table3_predictions(model):
    span_w, span_i, l2, l1, dt_wave = TABLE3[model]
    row = table3_row(span_w, span_i, l2, l1)
    # The paper rounds its medians to 0.01 µs, so a difference of two of them is good to ±0.01.
    assert row["predicted_stall_wave_ns"] == pytest.approx(dt_wave, abs=0.011)
    assert row["predicted_stall_interleaved_ns"] == 0.0
    if model == "DSv4-Pro":  # the negative control: its long Linear-2 mainloop covers the span
        assert row["predicted_stall_wave_ns"] == 0.0


def test_burst_gap_law():
    v, r, t0 = 4 * MIB, 65.0, 300.0
    drain = v / r
    assert bg.recovery_gap_ns(v, r, t0) == pytest.approx(drain - t0)
    assert bg.issue_time_ns(0.0, v, r, t0) == pytest.approx(drain)
    assert bg.issue_time_ns(1e9, v, r, t0) == pytest.approx(t0)
    assert bg.period_ns(0.0, v, r, t0) == pytest.approx(drain)
    assert bg.period_ns(1e6, v, r, t0) == pytest.approx(t0 + 1e6)
    g = np.linspace(0, 2 * drain, 50)
    assert np.all(bg.issue_overhead_ns(g, v, r, t0) == np.maximum(drain - g - t0, 0))
    assert bg.design_verdict(v, 0.0, r, t0, 8 * MIB)[0] == "reshape"
    assert bg.design_verdict(v, drain, r, t0, 8 * MIB) == ("piggyback", [])


def test_isolated_issue_law():
    r, t0, q = 65.0, 600.0, 20 * MIB
    assert bg.isolated_issue_time_ns(10 * MIB, r, t0, q) == t0
    assert bg.isolated_issue_time_ns(40 * MIB, r, t0, q) == pytest.approx((40 - 20) * MIB / r)


def test_interleave_whatif():
    # wave: G = T_L2 = 5 µs; V/R − G − T0 = 9.93 − 5 − 0.76 ≈ 4.17 µs of issue overhead; one L1 tile
    # of 9.77 µs per L2 tile removes it all.
    v = 9.93e3 * 717.0
    d = interleave(v, 9770.0, 5000.0, 1, 1, 760.0, 717.0, 128, 148, 2048)
    assert d["issue_overhead_wave_ns"] == pytest.approx(9930 - 5000 - 760, abs=1)
    assert d["issue_overhead_interleaved_ns"] == 0.0
    assert d["gap_interleaved_ns"] == pytest.approx(14770.0)
    assert d["full_recovery"] is True
    assert d["d_knee_rows"] == math.ceil(128 * 148 / (2 * 2048))


def test_partition_reference_rho():
    assert RHO_REF == pytest.approx(10.05, abs=0.01)


def test_partition_small_case_by_hand():
    # 4 experts of 256 tokens, N = 2048, L = 2 splits, D = 4: W_comp = 4·2·⌈1024/128⌉ = 64 tiles per
    # split, W_comm = ⌈⌈1024/4⌉/128⌉·⌈1024/1024⌉ = 2. With ρ = 1 and 8 SMs:
    p = PartitionProblem((256,) * 4, 1024, 2048, 352, 2, 4, num_sms=8, max_comm_ctas=4)
    assert work_tiles(p) == (64, 2)
    t = completion_times(p, rho=1.0).set_index("comm_ctas")
    # C = 1: P = 2·7 = 14, A_0 = ⌈64/14⌉ = 5, A_1 = ⌈128/14⌉ = 10, q = 2 → F_0 = 7, F_1 = max(10, 7) + 2 = 12
    assert t.loc[1, "compute_slots"] == 14 and t.loc[1, "completion_waves"] == 12
    # C = 2: P = 12, A = (6, 11), q = 1 → T = 12; C = 3: P = 10, A = (7, 13), q = 1 → 14; C = 4: P = 8, A = (8, 16) → 17
    assert list(t["completion_waves"]) == [12, 12, 14, 17]
    # T(1) = T(2): the tie goes to fewer empty slots in the last compute wave (C=1: 5·14−64 = 6; C=2: 6·12−64 = 8)
    assert list(t["empty_slots_last_wave"][:2]) == [6, 8]
    assert choose_comm_ctas(t.reset_index()) == 1


def test_partition_tie_breaker_changes_the_choice():
    p = PartitionProblem((256,) * 4, 1024, 2048, 352, 2, 4, num_sms=8, max_comm_ctas=4)
    t = completion_times(p, rho=1.0)
    # Without the tie-breaker the smaller-is-first rule and the argmin agree; make C=2 the
    # emptier one and it must win.
    t.loc[t["comm_ctas"] == 2, "empty_slots_last_wave"] = 0
    assert choose_comm_ctas(t) == 2


def _loop_backlog(db):
    q, out = 0.0, []
    for d in db:
        out.append(q)
        q = max(q + d, 0.0)
    return np.array(out)


finite = st.floats(min_value=-5e6, max_value=5e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=60))
def test_backlog_closed_form_matches_the_recursion(db):
    q = backlog_bytes(db)
    assert np.all(q >= 0)
    assert np.allclose(q, _loop_backlog(db), atol=1e-6 * (1 + np.abs(db).sum()))


pos_v = st.floats(min_value=0, max_value=2e7, allow_nan=False)
pos_g = st.floats(min_value=0, max_value=1e6, allow_nan=False)


def burst_arrays(min_size: int, max_size: int):
    """Strategy: (volumes, gaps) arrays of one burst sequence."""
    return st.lists(st.tuples(pos_v, pos_g), min_size=min_size, max_size=max_size).map(
        lambda bs: (np.array([b[0] for b in bs]), np.array([b[1] for b in bs])))


@settings(max_examples=200, deadline=None)
@given(burst_arrays(1, 40), st.floats(min_value=1, max_value=1000))
def test_all_rho_below_one_means_no_backlog(bursts, rate):
    v, g = bursts
    a = audit_sequence(v, g, 100.0, rate, None)
    if np.all(a.table["rho"] <= 1):
        assert np.all(a.table["q_bytes"] == 0)


@settings(max_examples=100, deadline=None)
@given(pos_v, pos_g, st.floats(min_value=1, max_value=1000), st.floats(min_value=10, max_value=5000))
def test_homogeneous_sequence_agrees_with_eq1(v, g, rate, t0):
    """ρ ≤ 1 ⇔ Δb ≤ 0 ⇔ G ≥ G*, and a homogeneous drain-limited sequence's backlog grows by Δb."""
    n = 20
    a = audit_sequence(np.full(n, v), np.full(n, g), t0, rate, None)
    rho = a.table["rho"].iloc[0]
    db = a.table["delta_b_bytes"].iloc[0]
    g_star = bg.recovery_gap_ns(v, rate, t0)
    assert (rho <= 1 + 1e-12) == (db <= 1e-6 * max(v, 1)) or abs(db) < 1e-6 * max(v, 1)
    assert (db <= 0) == (g >= g_star - 1e-9 * max(g_star, 1)) or abs(g - g_star) < 1e-6 * max(g_star, 1)
    expected = np.maximum(np.arange(n) * db, 0)
    assert np.allclose(a.table["q_bytes"], expected, rtol=1e-9, atol=1e-6 * max(v, 1))


@settings(max_examples=150, deadline=None)
@given(burst_arrays(2, 30), st.integers(min_value=0, max_value=29), st.floats(min_value=0, max_value=1),
       st.floats(min_value=1, max_value=1000))
def test_splitting_a_gap_into_zero_volume_periods(bursts, where, frac, rate):
    """A gap G split into G1 + a zero-volume period of G2 gives the same backlog afterwards."""
    v, g = bursts
    t0 = 0.0
    i = where % len(v)
    g1 = g[i] * frac
    v2 = np.insert(v, i + 1, 0.0)
    g2 = np.insert(g, i + 1, g[i] - g1)
    g2[i] = g1
    # q before each burst plus the backlog after the last one (append a zero-balance step).
    q = backlog_bytes(np.append(byte_balance(v, rate, t0, g), 0.0))
    q_split = backlog_bytes(np.append(byte_balance(v2, rate, t0, g2), 0.0))
    original = np.append(np.delete(np.arange(len(v2)), i + 1), len(v2))  # where each original step landed
    assert np.allclose(q_split[original], q, rtol=1e-9, atol=1e-6 * (1 + v.sum()))


@settings(max_examples=100, deadline=None)
@given(burst_arrays(1, 50), st.floats(min_value=1, max_value=1000), st.floats(min_value=1e5, max_value=5e7),
       st.floats(min_value=0, max_value=500))
def test_stalled_trajectory_matches_its_recursion(bursts, rate, cap, overhead):
    v, g = bursts
    t0 = np.full(len(v), 200.0)
    df = stalled_trajectory(v, g, t0, rate, cap, overhead)
    q, qs, ts = 0.0, [], []
    for i in range(len(v)):
        qs.append(q)
        t = max(t0[i], (q + v[i] - cap) / rate)
        ts.append(t)
        q = max(q + v[i] - rate * (t + g[i] + overhead), 0.0)
    tol = 1e-6 * (1 + v.sum())
    assert np.allclose(df["q_bytes"], qs, atol=tol)
    assert np.allclose(df["issue_ns"], ts, atol=tol / rate)
    assert np.all(df["q_bytes"] + v - rate * df["issue_ns"] <= cap + tol)  # never beyond the capacity
