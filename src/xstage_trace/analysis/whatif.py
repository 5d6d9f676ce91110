"""What-if schedules: MegaMoE interleaving (docs/model.md §6) and the FlashAttention Q-loop piggyback audit (§7)."""

from __future__ import annotations

import math

import numpy as np

from xstage_trace.analysis.burst_gap import isolated_excess_bytes, pos, recovery_gap_ns


def interleave(volume_bytes: float, mainloop_l1_ns: float, mainloop_l2_ns: float, n1: int, n2: int,
               issue_floor_ns: float, rate_gbps: float, n_tile_width: int | None = None,
               num_sms: int | None = None, expert_intermediate: int | None = None) -> dict:
    """docs/model.md §6: wave vs interleaved gap and issue overhead, full-recovery test, anti-starvation knee.

    G_wave ≈ T_L2; ΔT_wave = [V/R − G_wave − T0]₊; G_int ≈ T_L2 + (n1/n2)·T_L1;
    ΔT_int = [ΔT_wave − (n1/n2)·T_L1]₊; recovery iff n2·V / (n2·(T0 + T_L2) + n1·T_L1) ≤ R;
    D_knee = ⌈b_n·K_SM / (2·h_inter)⌉.
    """
    drain = volume_bytes / rate_gbps
    gap_wave = mainloop_l2_ns
    over_wave = max(drain - gap_wave - issue_floor_ns, 0.0)
    ratio = n1 / n2
    gap_int = mainloop_l2_ns + ratio * mainloop_l1_ns
    over_int = max(over_wave - ratio * mainloop_l1_ns, 0.0)
    offered_gbps = n2 * volume_bytes / (n2 * (issue_floor_ns + mainloop_l2_ns) + n1 * mainloop_l1_ns)
    knee = None
    if n_tile_width and num_sms and expert_intermediate:
        knee = math.ceil(n_tile_width * num_sms / (2 * expert_intermediate))
    return {
        "gap_wave_ns": gap_wave, "issue_overhead_wave_ns": over_wave,
        "gap_interleaved_ns": gap_int, "issue_overhead_interleaved_ns": over_int,
        "offered_rate_interleaved_gbps": offered_gbps, "full_recovery": bool(offered_gbps <= rate_gbps),
        "d_knee_rows": knee,
    }


def interleave_speedup(wave_kernel_ns: float, l2_tiles_per_cta: float, volume_bytes: float, mainloop_l1_ns: float,
                       mainloop_l2_ns: float, n1: int, n2: int, issue_floor_ns: float, rate_gbps: float) -> dict:
    """docs/model.md §6 at the kernel: the interleaved schedule's time predicted from the wave run.

    Each of a CTA's Linear-2 tiles pays the wave schedule's issue overhead ΔT_wave once (all CTAs store their tile
    together: one aligned burst of V = K·B per Linear-2 tile) and the interleaved one ΔT_int (``interleave``);
    T_int = T_wave − n_L2/CTA · (ΔT_wave − ΔT_int), speedup = T_wave / T_int.
    """
    d = interleave(volume_bytes, mainloop_l1_ns, mainloop_l2_ns, n1, n2, issue_floor_ns, rate_gbps)
    saved = l2_tiles_per_cta * (d["issue_overhead_wave_ns"] - d["issue_overhead_interleaved_ns"])
    t_int = wave_kernel_ns - saved
    return {**d, "saved_ns": saved, "interleaved_kernel_ns": t_int, "speedup": wave_kernel_ns / t_int}


def qloop_audit(tile_m: int, head_dim: int, elem_bytes: int, kv_tile: int, sigma_ns: float, producers: int,
                rate_gbps: float, issue_floor_ns: float, capacity_bytes: float | None, seq_lens) -> dict:
    """docs/model.md §7: B_t = b_m·d·s_out, V = K·B_t, G* = [V/R − T0]₊, G_Qloop(M) ≥ σ·⌈M/b_n⌉,
    M_ub* = b_n·⌈G*/σ⌉; per M: piggyback when the Q-loop gap covers G* and b^iso ≤ Q."""
    b_t = tile_m * head_dim * elem_bytes
    volume = producers * b_t
    g_star = float(recovery_gap_ns(volume, rate_gbps, issue_floor_ns))
    b_iso = float(isolated_excess_bytes(volume, rate_gbps, issue_floor_ns))
    m_ub = kv_tile * math.ceil(g_star / sigma_ns) if g_star > 0 else 0
    capacity_ok = None if capacity_bytes is None else bool(b_iso <= capacity_bytes)
    per_m = []
    for m in np.atleast_1d(seq_lens).astype(int).tolist():  # a handful of sequence lengths
        gap = sigma_ns * math.ceil(m / kv_tile)
        ok = gap >= g_star and capacity_ok is not False
        per_m.append({"seq_len": m, "qloop_gap_lb_ns": gap, "verdict": "piggyback" if ok else "reshape"})
    return {
        "bytes_per_producer": b_t, "volume_bytes": volume, "drain_time_ns": volume / rate_gbps,
        "recovery_gap_ns": g_star, "isolated_excess_bytes": b_iso, "capacity_ok": capacity_ok,
        "m_ub_tokens": m_ub, "per_seq_len": per_m,
    }


def completion_coupled_excess_ns(volume_bytes: float, rate_gbps: float, latency_ns: float, cover_ns) -> np.ndarray:
    """docs/model.md §7 counterfactual per aligned burst: Δt^cc = [V/R + T_lat − T_cover]₊."""
    return pos(volume_bytes / rate_gbps + latency_ns - np.asarray(cover_ns, dtype=np.float64))
