"""Regression gate between two runs: per configuration, the change of the median nsys kernel time
against a noise floor from the trial spread, plus the change of stalls and backpressured tiles.

The samples are the runs' trials as Table 3 counts them (``analysis.stall.kernel_trials``: launches
under a probe dump's configuration, the manifest's warm-ups left out), one value per trial: the
slowest rank's kernel time (docs/model.md §10).

Verdict rule (per configuration, kernel time; timing scope: nsys kernel time):

- threshold = max(gate %, noise %), noise % = the larger of the two runs' IQR / median (× 100) over
  their trials;
- 95 % bootstrap interval of the relative change of the median (resampling both runs' trials);
- **regression**: change > +threshold and the interval lies above 0;
- **improvement**: change < −threshold and the interval lies below 0;
- **neutral**: |change| ≤ threshold;
- **inconclusive**: the change exceeds the threshold but the interval contains 0, either run has
  fewer than ``min_trials`` trials, or the configuration is missing from the new run.
A configuration only in the new run is neutral (nothing to compare against).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from xstage_trace.base.errors import InputError
from xstage_trace.reports.configs import CONFIG_KEYS, run_trials, slowest_rank_trials, tile_configs

VERDICTS = ("regression", "improvement", "neutral", "inconclusive")


@dataclass(frozen=True)
class GateConfig:
    """How two runs are compared."""

    gate_pct: float = 2.0
    keys: tuple[str, ...] = CONFIG_KEYS
    min_trials: int = 3
    confidence: float = 0.95
    resamples: int = 4000
    seed: int = 0


def bootstrap_change_pct(base_ns: np.ndarray, new_ns: np.ndarray, cfg: GateConfig) -> tuple[float, float]:
    """Percentile bootstrap interval of 100·(median(new)/median(base) − 1), both samples resampled
    with replacement (vectorized: one matrix of resamples per run, fixed seed)."""
    rng = np.random.default_rng(cfg.seed)
    b = np.median(rng.choice(base_ns, size=(cfg.resamples, len(base_ns))), axis=1)
    n = np.median(rng.choice(new_ns, size=(cfg.resamples, len(new_ns))), axis=1)
    change = 100 * (n / b - 1)
    a = (1 - cfg.confidence) / 2
    lo, hi = np.quantile(change, [a, 1 - a])
    return float(lo), float(hi)


def rel_iqr_pct(x: np.ndarray) -> float:
    """100 · IQR / median."""
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    return float(100 * (q3 - q1) / med) if med else float("nan")


def kernel_verdict(base_ns: np.ndarray | None, new_ns: np.ndarray | None, cfg: GateConfig) -> dict:
    """The module docstring's rule for one configuration's trials (ns)."""
    row = {"base_ms": np.nan, "new_ms": np.nan, "base_trials": 0, "new_trials": 0, "change_pct": np.nan,
           "ci_low_pct": np.nan, "ci_high_pct": np.nan, "noise_pct": np.nan, "threshold_pct": np.nan}
    if base_ns is not None:
        row.update(base_ms=float(np.median(base_ns)) / 1e6, base_trials=len(base_ns))
    if new_ns is not None:
        row.update(new_ms=float(np.median(new_ns)) / 1e6, new_trials=len(new_ns))
    if base_ns is None:
        return dict(row, verdict="neutral", reason="new configuration (no baseline)")
    if new_ns is None:
        return dict(row, verdict="inconclusive", reason="missing from the new run")
    noise = max(rel_iqr_pct(base_ns), rel_iqr_pct(new_ns))
    thr = max(cfg.gate_pct, noise)
    change = 100 * (row["new_ms"] / row["base_ms"] - 1)
    row.update(change_pct=change, noise_pct=noise, threshold_pct=thr)
    if min(len(base_ns), len(new_ns)) < cfg.min_trials:
        return dict(row, verdict="inconclusive", reason=f"fewer than {cfg.min_trials} trials")
    lo, hi = bootstrap_change_pct(base_ns, new_ns, cfg)
    row.update(ci_low_pct=lo, ci_high_pct=hi)
    if abs(change) <= thr:
        return dict(row, verdict="neutral", reason=f"|change| ≤ {thr:.2f} %")
    if change > 0 and lo > 0:
        return dict(row, verdict="regression", reason=f"slower by more than {thr:.2f} %, interval above 0")
    if change < 0 and hi < 0:
        return dict(row, verdict="improvement", reason=f"faster by more than {thr:.2f} %, interval below 0")
    return dict(row, verdict="inconclusive", reason="change beyond the threshold but the interval contains 0")


def _stall_stats(run, keys: list[str]) -> pd.DataFrame:
    """Median measured stall (µs, probe clock per SM) and backpressured count of the Linear-2 tiles
    per configuration (as in Table 3) (tile labels; ``kernel`` is not a tile key: tiles carry the label's kernel name)."""
    tiles = run.tiles()
    tkeys = [k for k in keys if k != "kernel"]
    cols = tkeys + ["stall_meas_us", "backpressured_tiles"]
    if tiles.empty or not tkeys:
        return pd.DataFrame(columns=cols)
    t = tile_configs(tiles)
    l2 = t[t["tile_kind"] == "linear2"]
    s = l2.groupby(tkeys, sort=True)["measured_stall_ns"].median().div(1e3).rename("stall_meas_us")
    bp = l2.groupby(tkeys, sort=True)["backpressured"].sum().rename("backpressured_tiles")
    return pd.concat([s, bp], axis=1).reset_index()[cols]


def compare_runs(base, new, cfg: GateConfig = GateConfig()) -> pd.DataFrame:
    """One row per configuration (``cfg.keys``) of either run: kernel-time verdict columns plus
    base/new/Δ of the median measured stall and of the backpressured tiles."""
    keys = list(cfg.keys)
    unknown = [k for k in keys if k not in CONFIG_KEYS]
    if unknown:
        raise InputError(None, f"unknown configuration keys {unknown}", f"choose among {', '.join(CONFIG_KEYS)}")
    tb, tn = slowest_rank_trials(run_trials(base)), slowest_rank_trials(run_trials(new))
    if tb.empty or tn.empty:
        raise InputError(base.path if tb.empty else new.path, "run has no kernel trials (no launch under a probe dump's configuration, after warm-ups)",
                         "analyze an nsys report (-t cuda,nvtx) together with its probe dumps, with fewer --warmup-launches than launches")
    gb = {k if isinstance(k, tuple) else (k,): 1e6 * g["kernel_ms"].to_numpy() for k, g in tb.groupby(keys, sort=True)}
    gn = {k if isinstance(k, tuple) else (k,): 1e6 * g["kernel_ms"].to_numpy() for k, g in tn.groupby(keys, sort=True)}
    if not set(gb) & set(gn):
        raise InputError(new.path, "no configuration in common with the base run", f"compare runs of the same kernels, or match on fewer keys (--by, now {','.join(keys)})")
    rows = [dict(zip(keys, k), **kernel_verdict(gb.get(k), gn.get(k), cfg)) for k in sorted(set(gb) | set(gn))]
    out = pd.DataFrame(rows)
    sb, sn = _stall_stats(base, keys), _stall_stats(new, keys)
    tkeys = [k for k in keys if k != "kernel"]
    if tkeys:
        s = sb.merge(sn, on=tkeys, how="outer", suffixes=("_base", "_new"))
        out = out.merge(s, on=tkeys, how="left")
    for c in ("stall_meas_us", "backpressured_tiles"):
        if f"{c}_base" not in out:
            out[f"{c}_base"] = out[f"{c}_new"] = np.nan
        out[f"{c}_delta"] = out[f"{c}_new"] - out[f"{c}_base"]
    return out


MARKDOWN_MARK = b"# xstage-trace compare"
MAX_GATE_PCT = 100.0


def check_gate(gate_pct: float, accept: str | None) -> None:
    """InputError unless ``--gate`` is a finite percentage in [0, MAX_GATE_PCT] and ``--accept``, when
    given, is a reason (not blank, one line): a gate of inf or nan, or a blank reason, would pass any regression."""
    if not (math.isfinite(gate_pct) and 0 <= gate_pct <= MAX_GATE_PCT):
        raise InputError(None, f"--gate {gate_pct} is not a percentage between 0 and {MAX_GATE_PCT:g}", "give the gate as a finite percentage, e.g. --gate 2")
    if accept is not None and (not accept.strip() or not accept.isprintable()):
        raise InputError(None, f"--accept {accept!r} gives no reason (blank or not one line)", "write why the regression is accepted, e.g. --accept 'larger tiles, see PR 123'")


def gate_outcome(table: pd.DataFrame, accept: str | None) -> tuple[int, str]:
    """(exit code, one-line outcome): 1 when any configuration is a regression or inconclusive,
    unless ``accept`` gives the reason a known regression is accepted; else 0."""
    counts = {v: int((table["verdict"] == v).sum()) for v in VERDICTS}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    failing = counts["regression"] + counts["inconclusive"]
    if not failing:
        return 0, f"PASS: {summary}"
    if accept:
        return 0, f"ACCEPTED ({accept}): {summary}"
    return 1, f"FAIL: {summary}"


def compare_markdown(table: pd.DataFrame, outcome: str, base_path, new_path, cfg: GateConfig, accept: str | None) -> str:
    """compare.md: outcome first, then one row per configuration (report style, every number's scope named)."""
    from xstage_trace.reports.markdown import md_table

    keys = [k for k in cfg.keys if k in table]
    cols = {**{k: k for k in keys}, "verdict": "verdict", "base_ms": "base (ms, nsys)", "new_ms": "new (ms, nsys)",
            "change_pct": "Δ (%)", "ci_low_pct": "CI low (%)", "ci_high_pct": "CI high (%)", "threshold_pct": "threshold (%)",
            "base_trials": "trials base", "new_trials": "trials new",
            "stall_meas_us_base": "Δt meas base (µs, probe)", "stall_meas_us_new": "Δt meas new (µs, probe)",
            "backpressured_tiles_base": "bp L2 tiles base", "backpressured_tiles_new": "bp L2 tiles new", "reason": "reason"}
    order = table.assign(_o=table["verdict"].map({v: i for i, v in enumerate(VERDICTS)})).sort_values(["_o"] + keys, kind="stable")
    lines = ["# xstage-trace compare", "", f"**{outcome}**", "",
             f"- base: `{base_path}`", f"- new: `{new_path}`",
             f"- gate: {cfg.gate_pct:g} % on the median kernel time per configuration ({', '.join(cfg.keys)}); noise floor = the larger IQR/median of the two runs; "
             f"{100 * cfg.confidence:.0f} % bootstrap interval of the change ({cfg.resamples} resamples)"]
    if accept:
        lines.append(f"- accepted: {accept}")
    lines += ["", "_Timing scope: kernel time = nsys kernel rows (per trial the slowest rank, median over trials, warm-ups excluded); Δt meas = median measured MMA stall per Linear-2 tile, probe clock per SM._", "",
              md_table(order[[c for c in cols if c in order]].rename(columns=cols)), ""]
    return "\n".join(lines)
