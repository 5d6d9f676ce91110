"""Scoring a communication-CTA selector against a measured C sweep (docs/model.md §9, paper 004 §IV-B).

Input: a long table of kernel times, one row per launch (``workload``, ``comm_ctas``, ``trial``, ``kernel_ms``),
from interleaved trials over C; the selector's choice per workload. Oracle = the C of the lowest median time
within the legal domain (C ≤ ``max_comm_ctas``); regret = (T(C_selected) − T(C_oracle)) / T(C_oracle), both
medians. The speedup over a fixed C compares the selection with the single C whose times have the lowest
geometric mean over the workloads, with a bootstrap interval over workloads and trials.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def time_cube(times: pd.DataFrame, max_comm_ctas: int = 16) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A C sweep (docs/model.md §9 scoring) as workloads, C = 1 … max_comm_ctas and an array [workload, C, trial] of ms; NaN where a trial is missing."""
    t = times[times["comm_ctas"] <= max_comm_ctas]
    names = sorted(t["workload"].unique())
    cs = np.arange(1, max_comm_ctas + 1)
    trials = np.sort(t["trial"].unique())
    cube = np.full((len(names), cs.size, trials.size), np.nan)
    wi = {n: i for i, n in enumerate(names)}
    ti = {v: i for i, v in enumerate(trials)}
    cube[t["workload"].map(wi).to_numpy(), t["comm_ctas"].to_numpy() - 1, t["trial"].map(ti).to_numpy()] = t["kernel_ms"].to_numpy()
    return names, cs, cube


def regret_table(times: pd.DataFrame, selected: dict[str, int], max_comm_ctas: int = 16) -> pd.DataFrame:
    """Per workload (docs/model.md §9, paper 004 Table IV): c_oracle, t_oracle_ms, c_selected, t_selected_ms, regret_pct (medians over trials)."""
    import pandas as pd

    names, cs, cube = time_cube(times, max_comm_ctas)
    med = _medians(cube, 2)
    oracle = np.nanargmin(med, axis=1)
    sel = np.array([selected[n] for n in names]) - 1
    rows = np.arange(len(names))
    t_o, t_s = med[rows, oracle], med[rows, sel]
    return pd.DataFrame({"workload": names, "c_oracle": cs[oracle], "t_oracle_ms": t_o, "c_selected": cs[sel],
                         "t_selected_ms": t_s, "regret_pct": 100.0 * (t_s - t_o) / t_o})


def _medians(cube: np.ndarray, axis: int) -> np.ndarray:
    """Medians over trials, NaN (without a warning) for a C with no trial."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(cube, axis=axis)


def _fixed_speedup(med: np.ndarray, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """med [..., workload, C]; sel [..., workload] (0-based): best fixed C (geomean) and the geomean speedup of the selection over it.
    A C not measured for every workload is no candidate (its geomean is NaN; argmin would pick it)."""
    logm = np.log(med)
    mean = logm.mean(axis=-2)
    best = np.argmin(np.where(np.isnan(mean), np.inf, mean), axis=-1)
    t_fix = np.take_along_axis(logm, best[..., None, None].repeat(logm.shape[-2], axis=-2), axis=-1)[..., 0]
    t_sel = np.take_along_axis(logm, sel[..., None], axis=-1)[..., 0]
    return best, np.exp((t_fix - t_sel).mean(axis=-1))


def fixed_c_speedup(times: pd.DataFrame, selected: dict[str, int], max_comm_ctas: int = 16, n_boot: int = 2000,
                    seed: int = 0, level: float = 0.95) -> dict:
    """Geometric-mean speedup of the selected C over the best single fixed C (docs/model.md §9), with a bootstrap interval:
    each replicate resamples the workloads and, within each, the trials (with replacement), then re-finds the best
    fixed C and re-takes the medians."""
    names, cs, cube = time_cube(times, max_comm_ctas)
    sel = np.array([selected[n] for n in names]) - 1
    med = _medians(cube, 2)
    best, speedup = _fixed_speedup(med, sel)
    rng = np.random.default_rng(seed)
    nw, nc, nt = cube.shape
    out = []
    for chunk in range(0, n_boot, 250):
        b = min(250, n_boot - chunk)
        w = rng.integers(0, nw, size=(b, nw))
        tr = rng.integers(0, nt, size=(b, nw, nt))
        sub = cube[w]                                            # [b, nw, nc, nt]
        sub = np.take_along_axis(sub, tr[:, :, None, :].repeat(nc, axis=2), axis=3)
        out.append(_fixed_speedup(_medians(sub, 3), sel[w])[1])
    boot = np.concatenate(out)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return {"best_fixed_c": int(cs[best]), "speedup_geomean": float(speedup), "ci_low": float(lo), "ci_high": float(hi),
            "level": level, "n_boot": n_boot, "seed": seed}


def speedup_by_fixed_c(times: pd.DataFrame, selected: dict[str, int], max_comm_ctas: int = 16) -> dict[int, float]:
    """Geometric-mean speedup of the selection over each fixed C = 1 … max_comm_ctas (medians over trials; docs/model.md §9)."""
    names, cs, cube = time_cube(times, max_comm_ctas)
    logm = np.log(_medians(cube, 2))
    sel = np.array([selected[n] for n in names]) - 1
    t_sel = logm[np.arange(len(names)), sel]
    return {int(c): float(np.exp((logm[:, i] - t_sel).mean())) for i, c in enumerate(cs)}
