"""The docs/model.md §5 stall law on numbers and arrays, without pandas (``model stall`` imports only this)."""

from __future__ import annotations

import numpy as np

from xstage_trace.analysis.burst_gap import pos


def predicted_stall_ns(span_ns, cover_ns, lead_ns=0.0):
    """docs/model.md §5: Δt = [T_RS − T_cover^mma]₊ per tile, with our extension T_lead (default 0, the
    spec's assumption): Δt = [T_lead + T_RS − T_cover]₊, where T_lead is how much later the tile's
    store starts than the mainloop that covers it. The slot is freed at (cover start + T_lead + T_RS)
    and needed at (cover start + T_cover), so the lead adds to the store span one for one."""
    return pos(np.asarray(lead_ns, dtype=np.float64) + np.asarray(span_ns, dtype=np.float64) - np.asarray(cover_ns, dtype=np.float64))


def table3_row(span_wave_ns: float, span_interleaved_ns: float, mainloop_l2_ns: float, mainloop_l1_ns: float) -> dict:
    """docs/model.md §5 Table 3 predictions from medians: wave covers with the Linear-2 mainloop,
    interleaved with the Linear-1 mainloop that now follows each Linear-2 tile."""
    return {
        "span_wave_ns": span_wave_ns,
        "span_interleaved_ns": span_interleaved_ns,
        "mainloop_l2_ns": mainloop_l2_ns,
        "mainloop_l1_ns": mainloop_l1_ns,
        "predicted_stall_wave_ns": float(predicted_stall_ns(span_wave_ns, mainloop_l2_ns)),
        "predicted_stall_interleaved_ns": float(predicted_stall_ns(span_interleaved_ns, mainloop_l1_ns)),
    }
