"""Burst–Gap law for periodic bursts and the isolated-burst capacity law (docs/model.md §2, §3, §4 design test).

All functions are numpy-vectorized: arguments may be scalars or arrays. Times ns, volumes bytes,
rates GB/s (= bytes/ns).
"""

from __future__ import annotations

import numpy as np


def pos(x):
    """[x]₊ = max(x, 0)."""
    return np.maximum(x, 0.0)


def drain_time_ns(volume_bytes, rate_gbps):
    """V/R."""
    return np.asarray(volume_bytes, dtype=np.float64) / rate_gbps


def issue_time_ns(gap_ns, volume_bytes, rate_gbps, issue_floor_ns):
    """Eq. 1: T_iss(G) = max(T_iss^0, V/R − G)."""
    return np.maximum(issue_floor_ns, drain_time_ns(volume_bytes, rate_gbps) - gap_ns)


def period_ns(gap_ns, volume_bytes, rate_gbps, issue_floor_ns):
    """docs/model.md §2: T_period = max(T_iss^0 + G, V/R)."""
    return np.maximum(np.asarray(issue_floor_ns) + gap_ns, drain_time_ns(volume_bytes, rate_gbps))


def completion_coupled_period_ns(gap_ns, volume_bytes, rate_gbps):
    """docs/model.md §2 alternative model: G + V/R (what a completion-coupled sender would see)."""
    return np.asarray(gap_ns) + drain_time_ns(volume_bytes, rate_gbps)


def issue_overhead_ns(gap_ns, volume_bytes, rate_gbps, issue_floor_ns):
    """docs/model.md §2: ΔT_iss = [V/R − G − T_iss^0]₊."""
    return pos(drain_time_ns(volume_bytes, rate_gbps) - gap_ns - issue_floor_ns)


def recovery_gap_ns(volume_bytes, rate_gbps, issue_floor_ns):
    """docs/model.md §2: G* = [V/R − T_iss^0]₊, the smallest gap after which issue is back at its floor."""
    return pos(drain_time_ns(volume_bytes, rate_gbps) - issue_floor_ns)


def isolated_excess_bytes(volume_bytes, rate_gbps, issue_floor_ns):
    """docs/model.md §3/§4: b^iso = q_peak^0 = [V − R·T_iss^0]₊, outstanding bytes at the end of a recovered burst."""
    return pos(np.asarray(volume_bytes, dtype=np.float64) - rate_gbps * np.asarray(issue_floor_ns))


def isolated_issue_time_ns(volume_bytes, rate_gbps, issue_floor_ns, capacity_bytes):
    """docs/model.md §3: T_iss^iso = T_iss^0 while b^iso ≤ Q, else max(T_iss^0, (V − Q)/R)."""
    v = np.asarray(volume_bytes, dtype=np.float64)
    over = isolated_excess_bytes(v, rate_gbps, issue_floor_ns) > capacity_bytes
    return np.where(over, np.maximum(issue_floor_ns, (v - capacity_bytes) / rate_gbps), issue_floor_ns)


def capacity_from_knee_bytes(knee_volume_bytes, rate_gbps, issue_floor_ns):
    """docs/model.md §3: Q = V_knee − R·T_iss^0(V_knee)."""
    return np.asarray(knee_volume_bytes, dtype=np.float64) - rate_gbps * np.asarray(issue_floor_ns)


def offered_pressure(volume_bytes, rate_gbps, issue_floor_ns, gap_ns):
    """docs/model.md §4: ρ = V / (R·(T_iss^0 + G))."""
    return np.asarray(volume_bytes, dtype=np.float64) / (rate_gbps * (np.asarray(issue_floor_ns) + gap_ns))


def design_verdict(volume_bytes: float, gap_ns: float, rate_gbps: float, issue_floor_ns: float,
                   capacity_bytes: float | None) -> tuple[str, list[str]]:
    """docs/model.md §4 design test: rate bound V/(T_iss^0+G) ≤ R and capacity bound [V − R·T_iss^0]₊ ≤ Q.

    Returns ("piggyback" | "reshape", the bounds that failed).
    """
    failed = []
    if volume_bytes / (issue_floor_ns + gap_ns) > rate_gbps:
        failed.append("rate bound V/(T_iss^0+G) > R")
    if capacity_bytes is not None and float(isolated_excess_bytes(volume_bytes, rate_gbps, issue_floor_ns)) > capacity_bytes:
        failed.append("capacity bound [V - R*T_iss^0]+ > Q")
    return ("reshape" if failed else "piggyback"), failed
