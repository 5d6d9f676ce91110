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
