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


def table3_from_tiles(tiles: pd.DataFrame) -> pd.DataFrame:
    """Spec §5 Table 3 for measured runs: per (dest, shape), the medians of the Linear-2 remote-store
    span per schedule, of the Linear-2 and Linear-1 mainloops, and the median predicted / measured
    stall of the Linear-2 tiles per schedule. Configurations come from the dump labels
    (``dest=… shape=… schedule=wave|interleaved``)."""
    cfg = tiles["label"].str.extract(r"dest=(?P<dest>\S+).*shape=(?P<shape>\S+) schedule=(?P<schedule>\S+)")
    t = pd.concat([tiles, cfg], axis=1).dropna(subset=["schedule"])
    l2 = t[t["tile_kind"] == "linear2"]
    rows = []
    for (dest, shape), g in l2.groupby(["dest", "shape"], sort=True):  # one row per configuration
        w, i = g[g["schedule"] == "wave"], g[g["schedule"] == "interleaved"]
        l1 = t[(t["dest"] == dest) & (t["shape"] == shape) & (t["tile_kind"] == "linear1")]
        rows.append({
            "dest": dest, "shape": shape,
            "span_wave_us": w["rs_span_ns"].median() / 1e3, "span_interleaved_us": i["rs_span_ns"].median() / 1e3,
            "mainloop_l2_us": g["mainloop_ns"].median() / 1e3, "mainloop_l1_us": l1["mainloop_ns"].median() / 1e3,
            "stall_wave_pred_us": w["predicted_stall_ns"].median() / 1e3, "stall_wave_meas_us": w["measured_stall_ns"].median() / 1e3,
            "stall_interleaved_pred_us": i["predicted_stall_ns"].median() / 1e3,
            "stall_interleaved_meas_us": i["measured_stall_ns"].median() / 1e3,
            "backpressured_wave": int(w["backpressured"].sum()), "backpressured_interleaved": int(i["backpressured"].sum()),
            "tiles_l2": int(len(w)),
        })
    return pd.DataFrame(rows)


def attach_kernel_times(table3: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """Add the median kernel time per schedule (nsys kernel rows of the NVTX ranges named like the
    dump labels, ``… dest=D shape=S schedule=X …``; timing scope: kernel time) to a Table-3 frame."""
    out = table3.copy()
    k = kernels.dropna(subset=["nvtx_range"])
    if k.empty or out.empty:
        return out
    cfg = k["nvtx_range"].str.extract(r"dest=(?P<dest>\S+).*shape=(?P<shape>\S+) schedule=(?P<schedule>\S+)")
    k = pd.concat([k[["duration_ns"]], cfg], axis=1).dropna(subset=["schedule"])
    med = k.groupby(["dest", "shape", "schedule"])["duration_ns"].agg(["median", "size"]).reset_index()
    for sched in ("wave", "interleaved"):
        m = med[med["schedule"] == sched].set_index(["dest", "shape"])
        idx = pd.MultiIndex.from_frame(out[["dest", "shape"]])
        out[f"kernel_ms_{sched}"] = m["median"].reindex(idx).to_numpy() / 1e6
        out[f"launches_{sched}"] = m["size"].reindex(idx).to_numpy()
    return out
