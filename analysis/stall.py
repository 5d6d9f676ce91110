"""From epilogue stall to compute stall (spec §5, Table 3)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.burst_gap import pos


def predicted_stall_ns(span_ns, cover_ns):
    """Spec §5: Δt = [T_RS − T_cover^mma]₊ per tile."""
    return pos(np.asarray(span_ns, dtype=np.float64) - np.asarray(cover_ns, dtype=np.float64))


def table3_row(span_wave_ns: float, span_interleaved_ns: float, mainloop_l2_ns: float, mainloop_l1_ns: float) -> dict:
    """Spec §5 Table 3 predictions from medians: wave covers with the Linear-2 mainloop,
    interleaved with the Linear-1 mainloop that now follows each Linear-2 tile."""
    return {
        "span_wave_ns": span_wave_ns,
        "span_interleaved_ns": span_interleaved_ns,
        "mainloop_l2_ns": mainloop_l2_ns,
        "mainloop_l1_ns": mainloop_l1_ns,
        "predicted_stall_wave_ns": float(predicted_stall_ns(span_wave_ns, mainloop_l2_ns)),
        "predicted_stall_interleaved_ns": float(predicted_stall_ns(span_interleaved_ns, mainloop_l1_ns)),
    }


def stall_summary(tiles: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Table-3 style summary over tiles grouped by ``by``: medians of span, cover, mainloops,
    predicted and measured stall; counts of backpressured tiles."""
    agg = {
        "tiles": ("rs_span_ns", "size"),
        "span_med_ns": ("rs_span_ns", "median"),
        "cover_med_ns": ("cover_ns", "median"),
        "predicted_stall_med_ns": ("predicted_stall_ns", "median"),
        "predicted_stall_mean_ns": ("predicted_stall_ns", "mean"),
    }
    if "measured_stall_ns" in tiles:
        agg["measured_stall_med_ns"] = ("measured_stall_ns", "median")
        agg["measured_stall_mean_ns"] = ("measured_stall_ns", "mean")
    if "backpressured" in tiles:
        agg["backpressured_tiles"] = ("backpressured", "sum")
    return tiles.groupby(by, dropna=False).agg(**agg).reset_index()


CONFIG = ["dest", "shape", "variant"]
SCHEDULES = {"wave": "linear2", "interleaved": "linear1"}  # schedule → the tile kind whose mainloop covers (spec §5)


def _us(x: float) -> float:
    return float(x) / 1e3


def table3_from_tiles(tiles: pd.DataFrame) -> pd.DataFrame:
    """Spec §5 Table 3 for measured runs, one row per configuration (dest, shape, kernel variant):
    medians of the Linear-2 remote-store span per schedule and of the Linear-2 / Linear-1 mainloops;
    the predicted Δt both ways — the paper's ``[median span − median T^mma]₊`` (``*_pred_medians_us``,
    wave covered by the Linear-2 mainloop, interleaved by the Linear-1 one) and the median of the per-tile
    ``[T_RS − T_cover]₊`` (``*_pred_tiles_us``) — the median measured stall, the per-tile median and mean
    |predicted − measured|, the count of backpressured tiles, the count of Linear-2 tiles whose mainloop
    is inflated against the local control's (``analysis.tiles.mainloop_inflated``, whatever their slot
    wait) and of those that could be judged (``inflation_judged_*``: a control of that shape and operand
    path was traced). Timing scope: probe clock64 converted to ns per SM."""
    from xstage_trace.analysis.tiles import mainloop_inflated

    t = tiles.dropna(subset=["schedule"])
    t = t.assign(variant=t["variant"].fillna("-"))
    l2 = t[t["tile_kind"] == "linear2"]
    inflated = pd.Series(mainloop_inflated(l2), index=l2.index)
    rows = []
    for (dest, shape, variant), g in l2.groupby(CONFIG, sort=True):  # one row per configuration
        same = (t["dest"] == dest) & (t["shape"] == shape) & (t["variant"] == variant)
        ml = {k: t.loc[same & (t["tile_kind"] == k), "mainloop_ns"].median() for k in ("linear1", "linear2")}
        row = {"dest": dest, "shape": shape, "variant": variant,
               "mainloop_l2_us": _us(ml["linear2"]), "mainloop_l1_us": _us(ml["linear1"]), "tiles_l2": 0}
        for sched, cover_kind in SCHEDULES.items():
            w = g[g["schedule"] == sched]
            err = (w["predicted_stall_ns"] - w["measured_stall_ns"]).abs().dropna()
            row.update({
                f"span_{sched}_us": _us(w["rs_span_ns"].median()),
                f"stall_{sched}_pred_medians_us": _us(predicted_stall_ns(w["rs_span_ns"].median(), ml[cover_kind])),
                f"stall_{sched}_pred_tiles_us": _us(w["predicted_stall_ns"].median()),
                f"stall_{sched}_meas_us": _us(w["measured_stall_ns"].median()),
                f"err_{sched}_median_us": _us(err.median()) if len(err) else np.nan,
                f"err_{sched}_mean_us": _us(err.mean()) if len(err) else np.nan,
                f"backpressured_{sched}": int(w["backpressured"].sum()),
                f"inflated_{sched}": int(inflated[w.index].sum()),
                f"inflation_judged_{sched}": int(w["control_mainloop_ns"].notna().sum()),
            })
            row["tiles_l2"] = max(row["tiles_l2"], int(len(w)))
        rows.append(row)
    return pd.DataFrame(rows)


def kernel_trials(kernels: pd.DataFrame, dumps: pd.DataFrame, warmup_launches: int = 0) -> pd.DataFrame:
    """One row per (rank, configuration, trial) with the kernel time in ms (timing scope: kernel time,
    nsys) and ``kernel``, the nsys short name of the launched kernel. A configuration's launches are
    the kernels under NVTX ranges named by one of its dumps' labels; ``trial`` counts them in time
    order per rank, and the first ``warmup_launches`` of each (rank, configuration) are warm-ups,
    left out. A label that carries ``trial=N`` (negative for warm-ups) is used as is. This is the
    project's one definition of a trial (Table 3, report, ``compare``)."""
    from xstage_trace.base.config import RunConfig

    cols = ["rank", *CONFIG, "schedule", "kernel", "trial", "kernel_ms"]
    if kernels.empty or dumps.empty:
        return pd.DataFrame(columns=cols)
    cfg = dumps.drop_duplicates(["rank", "label"])[["rank", "label", *CONFIG, "schedule"]]
    k = kernels.dropna(subset=["nvtx_range"])
    k = k.assign(kernel=k["short_name"].fillna(k["name"]).astype(str) if "short_name" in k else k["name"].astype(str))
    k = k.merge(cfg, left_on=["rank", "nvtx_range"], right_on=["rank", "label"], how="inner")
    k = k.sort_values(["rank", "start_ns"], kind="stable")
    k["trial"] = k.groupby(["rank", "nvtx_range"]).cumcount() - int(warmup_launches)
    trial_of = {text: RunConfig.from_label(text).trial for text in k["nvtx_range"].unique()}  # one per configuration
    labelled = k["nvtx_range"].map(trial_of)
    k["trial"] = labelled.where(labelled.notna(), k["trial"]).astype(int)
    k = k[k["trial"] >= 0]
    return k.assign(kernel_ms=k["duration_ns"] / 1e6, variant=k["variant"].fillna("-"))[cols].reset_index(drop=True)


def attach_kernel_times(table3: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """Add per schedule the kernel time (spec §10: per trial the slowest rank, then the median over
    trials; warm-ups already excluded by ``kernel_trials``), the trials and the ranks counted."""
    from xstage_trace.analysis.timing import max_across_ranks_median

    out = table3.copy()
    if out.empty or trials.empty:
        return out
    med = max_across_ranks_median(trials, CONFIG + ["schedule"])
    idx = pd.MultiIndex.from_frame(out[CONFIG])
    for sched in SCHEDULES:
        m = med[med["schedule"] == sched].set_index(CONFIG)
        out[f"kernel_ms_{sched}"] = m["kernel_ms_max_rank_median"].reindex(idx).to_numpy()
        out[f"trials_{sched}"] = m["trials"].reindex(idx).to_numpy()
        out[f"ranks_{sched}"] = m["ranks"].reindex(idx).to_numpy()
    return out
