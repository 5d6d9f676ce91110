"""CTA partitioning for FLUX/COMET GEMM2+GatherRS (docs/model.md §9, paper 004): T(C) for every legal C, C*."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

RHO_REF = (400.19 / 2) / (497.36 / 25)  # docs/model.md §9, measured at C = 16 on the A100 path
K_REF, TM_REF, TN_REF, D_REF = 352, 128, 128, 4


@dataclass(frozen=True)
class PartitionProblem:
    """Workload and kernel description of one GEMM2+GatherRS launch (docs/model.md §9 notation)."""

    tokens_per_expert: tuple[int, ...]  # M_e
    tokens: int                         # M (global tokens before top-k expansion)
    hidden: int                         # N
    reduction: int                      # K (TP-local GEMM2 reduction dimension)
    splits: int                         # L
    ranks: int                          # D
    tile_m: int = 128                   # T_M
    tile_n: int = 128                   # T_N^comp
    comm_tile_m: int = 128              # T_M^comm
    comm_tile_n: int = 1024             # T_N^comm
    num_sms: int = 108                  # G_SM
    comm_per_sm: int = 1                # o_comm
    comp_per_sm: int = 2                # o_comp
    max_comm_ctas: int = 16


def cdiv(a, b):
    """⌈a/b⌉ for non-negative integers (arrays too)."""
    return -(-np.asarray(a) // np.asarray(b))


def scaled_rho(p: PartitionProblem, rho_ref: float = RHO_REF) -> float:
    """docs/model.md §9: ρ = ρ_ref · (K_ref/K) · (T_M,ref·T_N,ref)/(T_M·T_N) · (D/D_ref)."""
    return rho_ref * (K_REF / p.reduction) * (TM_REF * TN_REF) / (p.tile_m * p.tile_n) * (p.ranks / D_REF)


def work_tiles(p: PartitionProblem) -> tuple[int, int]:
    """docs/model.md §9: W_comp = Σ_e ⌈M_e/T_M⌉·⌈⌈N/L⌉/T_N⌉ and W_comm = ⌈⌈M/D⌉/T_M^comm⌉·⌈⌈N/L⌉/T_N^comm⌉."""
    width = int(cdiv(p.hidden, p.splits))
    w_comp = int(np.sum(cdiv(np.asarray(p.tokens_per_expert), p.tile_m)) * cdiv(width, p.tile_n))
    w_comm = int(cdiv(cdiv(p.tokens, p.ranks), p.comm_tile_m) * cdiv(width, p.comm_tile_n))
    return w_comp, w_comm


def completion_columns(p: PartitionProblem, rho=None) -> dict[str, np.ndarray]:
    """docs/model.md §9 for every legal C, as arrays (no pandas: ``model partition`` starts fast): R(C), P(C), V_comp, V_comm, q(C), T(C) = F_{L−1}, Δ_comp.

    ``rho``: one ratio for every C (§9's ρ), or one per C = 1 … max_comm_ctas (a communication wave whose
    length depends on C, ``partition_select.comm_rho``); default ρ_ref scaled.
    F_s = max(A_s, F_{s−1}) + q unrolls to F_{L−1} = max_s (A_s + (L − s)·q): one array expression
    over (C, s).
    """
    rho = scaled_rho(p) if rho is None else rho
    w_comp, w_comm = work_tiles(p)
    C = np.arange(1, p.max_comm_ctas + 1)
    reserve = cdiv(C, p.comm_per_sm)
    slots = p.comp_per_sm * (p.num_sms - reserve)
    legal = slots > 0
    rho = np.broadcast_to(np.asarray(rho, dtype=np.float64), C.shape)[legal]
    C, reserve, slots = C[legal], reserve[legal], slots[legal]
    v_comp = cdiv(w_comp, slots)
    v_comm = cdiv(w_comm, C)
    q = rho * v_comm
    s = np.arange(p.splits)
    ready = cdiv((s[None, :] + 1) * w_comp, slots[:, None])
    total = np.max(ready + (p.splits - s[None, :]) * q[:, None], axis=1)
    return {
        "comm_ctas": C, "reserved_sms": reserve, "compute_slots": slots, "compute_waves": v_comp,
        "comm_waves": v_comm, "split_service": q, "completion_waves": total,
        "empty_slots_last_wave": v_comp * slots - w_comp,
    }


def completion_times(p: PartitionProblem, rho: float | None = None) -> pd.DataFrame:
    """``completion_columns`` (docs/model.md §9) as a DataFrame, one row per legal C."""
    import pandas as pd

    return pd.DataFrame(completion_columns(p, rho))


def choose_comm_ctas(table) -> int:
    """C* = argmin T(C); ties broken by the fewest empty slots in the last compute wave, then the smaller C.
    ``table``: ``completion_times``'s DataFrame or ``completion_columns``'s arrays."""
    t = np.round(np.asarray(table["completion_waves"], dtype=np.float64), 9)  # ties are exact in wave units
    empty, c = np.asarray(table["empty_slots_last_wave"]), np.asarray(table["comm_ctas"])
    return int(c[np.lexsort((c, empty, t))[0]])
