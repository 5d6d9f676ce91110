"""Backlog recurrence and capacity guard for non-uniform burst sequences (docs/model.md §4).

Everything runs over columns. The floor-issue backlog q_{n+1} = [q_n + Δb_n]₊ is a Lindley
recursion: with S_n = Σ_{i<n} Δb_i (S_0 = 0), q_n = S_n − min_{k≤n} S_k. The stalled trajectory
(our extension) composes clamp maps x ↦ min(max(x + a, lo), hi), which are closed under
composition, so it is an associative prefix scan (blocked, ⌈log2 4096⌉ vectorized steps per level).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from xstage_trace.analysis.burst_gap import isolated_excess_bytes, offered_pressure, pos


def byte_balance(volume_bytes, rate_gbps, issue_floor_ns, gap_ns):
    """docs/model.md §4: Δb_n = V_n − R·(T_iss,n^0 + G_n)."""
    return np.asarray(volume_bytes, dtype=np.float64) - rate_gbps * (np.asarray(issue_floor_ns, dtype=np.float64) + gap_ns)


def backlog_bytes(delta_b) -> np.ndarray:
    """docs/model.md §4: q_n before each burst for q_{n+1} = [q_n + Δb_n]₊, q_0 = 0 (length N; closed form).

    An unbounded gap (Δb_n = −∞: no next burst in that launch) drains the queue, q_{n+1} = 0; it is
    replaced by a finite balance more negative than every backlog the sequence can build, so the
    closed form never meets −∞ − (−∞).
    """
    db = np.asarray(delta_b, dtype=np.float64)
    drained = np.isneginf(db)
    if drained.any():
        db = np.where(drained, -(np.abs(np.where(drained, 0.0, db)).sum() + 1.0), db)
    s = np.concatenate(([0.0], np.cumsum(db[:-1])))  # S_0 … S_{N-1}: the last balance only acts after the last burst
    return s - np.minimum.accumulate(s)


@dataclass
class SequenceAudit:
    """Per-burst columns of the audit plus the onset of backpressure."""

    table: pd.DataFrame
    onset: int | None  # first burst whose capacity guard fails
    onset_excess_bytes: float | None


def audit_sequence(volume_bytes, gap_ns, issue_floor_ns, rate_gbps, capacity_bytes: float | None) -> SequenceAudit:
    """docs/model.md §4: ρ_n, Δb_n, q_n, b_n^iso and the guard q_n + b_n^iso ≤ Q for every burst (``rate_gbps``
    and ``capacity_bytes``: one value, or one per burst)."""
    v = np.asarray(volume_bytes, dtype=np.float64)
    g = np.asarray(gap_ns, dtype=np.float64)
    t0 = np.broadcast_to(np.asarray(issue_floor_ns, dtype=np.float64), v.shape)
    db = byte_balance(v, rate_gbps, t0, g)
    q = backlog_bytes(db)
    b_iso = isolated_excess_bytes(v, rate_gbps, t0)
    guard = np.ones(len(v), bool) if capacity_bytes is None else (q + b_iso <= capacity_bytes)
    df = pd.DataFrame({
        "volume_bytes": v, "gap_ns": g, "issue_floor_ns": t0,
        "rho": offered_pressure(v, rate_gbps, t0, g), "delta_b_bytes": db,
        "q_bytes": q, "b_iso_bytes": b_iso, "guard_ok": guard,
    })
    fails = np.flatnonzero(~guard)
    onset = int(fails[0]) if len(fails) else None
    cap = None if capacity_bytes is None else np.broadcast_to(np.asarray(capacity_bytes, dtype=np.float64), v.shape)
    excess = float(q[onset] + b_iso[onset] - cap[onset]) if onset is not None else None
    return SequenceAudit(df, onset, excess)


SCAN_BLOCK = 4096


def _clamp_scan_rows(A: np.ndarray, L: np.ndarray, U: np.ndarray) -> None:
    """In place along the last axis: Hillis–Steele scan of clamp maps x ↦ min(max(x + A, L), U);
    g∘f = clamp(x + A1 + A2, max(L1 + A2, L2), min(max(U1 + A2, L2), U2))."""
    step = 1
    while step < A.shape[-1]:
        A1, L1, U1 = A[..., :-step], L[..., :-step], U[..., :-step]
        A2, L2, U2 = A[..., step:], L[..., step:], U[..., step:]
        new_u = U1 + A2
        np.maximum(new_u, L2, out=new_u)
        np.minimum(new_u, U2, out=new_u)
        new_l = L1 + A2
        np.maximum(new_l, L2, out=new_l)
        np.minimum(new_l, new_u, out=new_l)
        A[..., step:] += A1  # numpy buffers the overlapping operands
        U[..., step:] = new_u
        L[..., step:] = new_l
        step *= 2


def _clamp_scan_apply(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, x0: float = 0.0) -> np.ndarray:
    """(f_n ∘ … ∘ f_0)(x0) for every n, f_n(x) = min(max(x + a_n, lo_n), hi_n).

    Blocked: a scan inside blocks of SCAN_BLOCK maps (2-D, all blocks at once), a scan over the
    blocks' total maps, then each block's prefix maps applied to the value entering the block. A shorter
    sequence is one block of its own length: a map's prefix depends only on the maps before it, so padding
    it to SCAN_BLOCK with identity maps gave the same numbers for 4096/n times the work.
    """
    n = len(a)
    block = min(SCAN_BLOCK, max(n, 1))
    nb = -(-n // block)
    pad = nb * block - n
    A = np.concatenate((a, np.zeros(pad))).reshape(nb, block)
    L = np.concatenate((lo, np.full(pad, -np.inf))).reshape(nb, block)
    U = np.concatenate((hi, np.full(pad, np.inf))).reshape(nb, block)
    _clamp_scan_rows(A, L, U)
    tA, tL, tU = A[:, -1].copy(), L[:, -1].copy(), U[:, -1].copy()
    _clamp_scan_rows(tA, tL, tU)
    x_in = np.empty(nb)
    x_in[0] = x0
    x_in[1:] = np.minimum(np.maximum(x0 + tA[:-1], tL[:-1]), tU[:-1])
    out = A
    out += x_in[:, None]
    np.maximum(out, L, out=out)
    np.minimum(out, U, out=out)
    return out.reshape(-1)[:n]


def stalled_trajectory(volume_bytes, gap_ns, issue_floor_ns, rate_gbps: float, capacity_bytes: float,
                       loop_overhead_ns: float = 0.0) -> pd.DataFrame:
    """docs/model.md §4 extension: issue stretches just enough to respect Q.

    T_iss,n = max(T_iss,n^0, (q_n + V_n − Q)/R);  q_{n+1} = [q_n + V_n − R·(T_iss,n + G_n + o)]₊.
    Substituting T_iss,n gives q_{n+1} = min(max(q_n + a_n, 0), max(c_n, 0)) with
    a_n = V_n − R·(T^0_n + G_n + o) and c_n = Q − R·(G_n + o): a clamp map, scanned in closed form.
    """
    g = np.asarray(gap_ns, dtype=np.float64)
    q_before, t_iss, q_after, t0 = stalled_issue(volume_bytes, g, issue_floor_ns, rate_gbps, capacity_bytes, loop_overhead_ns)
    return pd.DataFrame({
        "q_bytes": q_before, "issue_ns": t_iss, "issue_overhead_ns": t_iss - t0,
        "period_ns": t_iss + g + loop_overhead_ns, "q_after_bytes": q_after,
    })


def stalled_issue(volume_bytes, gap_ns, issue_floor_ns, rate_gbps: float, capacity_bytes: float,
                  loop_overhead_ns: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``stalled_trajectory``'s columns as arrays (docs/model.md §4 extension): (q_n before each burst, T_iss,n,
    q_{n+1} after it, the floor T_iss,n^0), for a caller that runs it per launch and keeps one column."""
    v = np.asarray(volume_bytes, dtype=np.float64)
    g = np.asarray(gap_ns, dtype=np.float64)
    t0 = np.broadcast_to(np.asarray(issue_floor_ns, dtype=np.float64), v.shape)
    a = v - rate_gbps * (t0 + g + loop_overhead_ns)
    c = pos(capacity_bytes - rate_gbps * (g + loop_overhead_ns))
    q_after = _clamp_scan_apply(a, np.zeros_like(a), c)
    q_before = np.concatenate(([0.0], q_after[:-1]))
    t_iss = np.maximum(t0, (q_before + v - capacity_bytes) / rate_gbps)
    return q_before, t_iss, q_after, t0
