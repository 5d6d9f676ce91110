"""Launch-time choice of the communication-CTA count from the kernel's own quantities (docs/model.md §9).

§9's model (paper 004) with its service ratio ρ measured on the kernel instead of the A100 reference: one
compute wave lasts ``t_wave_ns`` (one compute tile of this K on every compute slot) and one communication wave
lasts τ(C) = τ_1 + C·τ_c ns: τ_1, a communication CTA's tile time when it alone draws on memory, and τ_c, what
each further concurrent communication CTA adds (their gathers and stores share the memory system), so that
ρ(C) = τ(C) / t_wave. τ_c = 0 is §9's fixed ρ. The three numbers are fitted on a calibration run (probed
compute-tile and communication-tile spans at several C, ``fit_service_times``), never on the workloads whose
choice is scored. ``instrument/examples/partition_select.hpp`` is the same arithmetic in C++ for the launcher.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xstage_trace.analysis.partition import PartitionProblem, choose_comm_ctas, completion_columns


@dataclass(frozen=True)
class ServiceTimes:
    """Measured service times of one kernel shape (docs/model.md §9, ρ measured): compute wave, comm tile at C = 1, per-CTA increment."""

    t_wave_ns: float
    tau_1_ns: float
    tau_c_ns: float = 0.0


def comm_rho(s: ServiceTimes, comm_ctas) -> np.ndarray:
    """Docs/model.md §9 with ρ measured: ρ(C) = (τ_1 + C·τ_c) / t_wave, a communication wave in compute waves."""
    c = np.asarray(comm_ctas, dtype=np.float64)
    return (s.tau_1_ns + c * s.tau_c_ns) / s.t_wave_ns


def predicted_completion(p: PartitionProblem, s: ServiceTimes) -> dict[str, np.ndarray]:
    """Docs/model.md §9's T(C) for every legal C under measured service times; adds ``completion_ns`` = T(C)·t_wave."""
    cols = completion_columns(p, comm_rho(s, np.arange(1, p.max_comm_ctas + 1)))
    cols["completion_ns"] = cols["completion_waves"] * s.t_wave_ns
    return cols


def select_comm_ctas(p: PartitionProblem, s: ServiceTimes) -> int:
    """C* = argmin T(C) (docs/model.md §9, ties: fewest empty last-wave compute slots, then the smaller C) under measured service times."""
    return choose_comm_ctas(predicted_completion(p, s))


def fit_service_times(comm_ctas, comp_tile_ns, comm_tile_ns, max_comm_ctas: int = 16) -> ServiceTimes:
    """Docs/model.md §9 (ρ measured) from one calibration run's probes: per probed launch at C communication CTAs, the median
    compute-tile span and the median communication-tile span.

    t_wave = the median compute-tile span over the launches (a compute CTA runs its tiles back to back, so one tile
    is one wave); τ_1, τ_c = the least-squares line τ(C) = τ_1 + C·τ_c through the launches with C ≤ max_comm_ctas
    (the legal domain the selector searches).
    """
    c = np.asarray(comm_ctas, dtype=np.float64)
    comp = np.asarray(comp_tile_ns, dtype=np.float64)
    comm = np.asarray(comm_tile_ns, dtype=np.float64)
    keep = c <= max_comm_ctas
    if keep.sum() < 2 or np.unique(c[keep]).size < 2:
        raise ValueError("fit_service_times needs launches at two or more C within the legal domain")
    slope, intercept = np.polyfit(c[keep], comm[keep], 1)
    return ServiceTimes(float(np.median(comp)), float(intercept), float(max(slope, 0.0)))
