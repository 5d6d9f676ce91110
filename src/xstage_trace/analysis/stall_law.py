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
