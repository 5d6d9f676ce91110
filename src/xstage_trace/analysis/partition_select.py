"""Launch-time choice of the communication-CTA count from the kernel's own quantities (docs/model.md §9).

§9's model (paper 004) with its service times measured on the kernel instead of the A100 reference ρ: with C
communication CTAs, one compute wave lasts t_wave(C) ns (one compute tile on every compute slot) and one
communication wave τ(C) ns (one communication tile on every communication CTA), both read off a calibration run
of the same kernel shape (probed compute-tile and communication-tile spans at every C, ``fit_service_times``),
never off the workloads whose choice is scored. Both depend on C on a real memory system: τ(C) grows once the
C CTAs' stores saturate the destination (the host-mapped path's PCIe link), and t_wave(C) grows while their
traffic shares the SMs' memory path with the compute CTAs. In §9's recurrence the split readiness A_s and the
service q(C) = V_comm(C)·τ(C) are then taken in ns: A_s(C) = ⌈(s+1)·W_comp/P(C)⌉·t_wave(C),
F_s = max(A_s, F_{s−1}) + q(C), T(C) = F_{L−1}; with constant t_wave and τ this is §9 exactly (ρ = τ/t_wave).
``instrument/examples/partition_select.hpp`` is the same arithmetic in C++ for the launcher.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xstage_trace.analysis.partition import PartitionProblem, completion_columns


@dataclass(frozen=True)
class ServiceTimes:
    """Measured service times of one kernel shape (docs/model.md §9, ρ measured): t_wave(C) and τ(C) in ns for C = 1 … len."""

    t_wave_ns: tuple[float, ...]
    tau_ns: tuple[float, ...]

    def __post_init__(self):
        if len(self.t_wave_ns) != len(self.tau_ns) or not self.tau_ns:
            raise ValueError("t_wave_ns and tau_ns need one value per C = 1 … C_max, the same number of each")


def comm_rho(s: ServiceTimes, max_comm_ctas: int) -> np.ndarray:
    """Docs/model.md §9 with ρ measured: ρ(C) = τ(C)/t_wave(C) for C = 1 … max_comm_ctas (a communication wave in compute waves)."""
    if max_comm_ctas > len(s.tau_ns):
        raise ValueError(f"service times cover C ≤ {len(s.tau_ns)}, not {max_comm_ctas}")
    return np.asarray(s.tau_ns[:max_comm_ctas]) / np.asarray(s.t_wave_ns[:max_comm_ctas])


def predicted_completion(p: PartitionProblem, s: ServiceTimes) -> dict[str, np.ndarray]:
    """Docs/model.md §9's columns for every legal C under measured service times, plus ``completion_ns`` = T(C)·t_wave(C)."""
    cols = completion_columns(p, comm_rho(s, p.max_comm_ctas))
    cols["wave_ns"] = np.asarray(s.t_wave_ns)[cols["comm_ctas"] - 1]
    cols["completion_ns"] = cols["completion_waves"] * cols["wave_ns"]
    return cols


def select_comm_ctas(p: PartitionProblem, s: ServiceTimes) -> int:
    """C* = argmin T(C) in ns (docs/model.md §9; ties within 1e-6 ns: fewest empty last-wave compute slots, then the smaller C)."""
    cols = predicted_completion(p, s)
    t = np.round(cols["completion_ns"], 6)
    return int(cols["comm_ctas"][np.lexsort((cols["comm_ctas"], cols["empty_slots_last_wave"], t))[0]])


def fit_service_times(comm_ctas, comp_tile_ns, comm_tile_ns) -> ServiceTimes:
    """Docs/model.md §9 (ρ measured) from one calibration run's probes: per probed launch at C communication CTAs, the mean
    compute-tile span (a compute CTA runs its tiles back to back, so it is one compute wave) and the mean
    communication-tile span (one communication wave). C = 1 … max(C) must all be there; several launches at one C
    are averaged."""
    c = np.asarray(comm_ctas, dtype=np.int64)
    n = int(c.max()) if c.size else 0
    have = np.bincount(c, minlength=n + 1)[1:]
    if n == 0 or (have == 0).any():
        raise ValueError("fit_service_times needs a probed launch at every C = 1 … C_max")
    wave = np.bincount(c, weights=np.asarray(comp_tile_ns, dtype=np.float64), minlength=n + 1)[1:] / have
    tau = np.bincount(c, weights=np.asarray(comm_tile_ns, dtype=np.float64), minlength=n + 1)[1:] / have
    return ServiceTimes(tuple(wave.tolist()), tuple(tau.tolist()))
