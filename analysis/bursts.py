"""Burst reconstruction from probe records and the §4 audit of the real burst sequence.

A remote-store span is a begin/end pair of a remote-store event on one slice (the end record's
payload carries the bytes). A burst is one issue round of the producers (spec §4's V_n): burst n
of a dump is the n-th remote-store span of every producer (CTA) that stores, in the producer's own
time order. For the calibration bench this is its own burst index (the record's tile field); for a
fused kernel it is the n-th Linear-2 epilogue of each CTA, i.e. one expert wave's worth of tiles
when the schedule is aligned. Overlap in time is not used: under backpressure the rounds of
different producers overlap and a transitive chain of overlaps would merge a whole kernel.

Per burst: V_n = Σ bytes, K_act,n = the producers in the round, start = the earliest begin,
end = the latest end, T_iss,n = end − start, and the gap G_n = the median over the round's
producers of each one's offered compute before its next store (spec §1: the useful producer time
between bursts). Where the dump has a tile table (a fused kernel) that is the sum of the producer's
mainloops from the tile after the stored one through the next stored tile (wave schedule: the next
Linear-2 mainloop, the tile's T_cover; interleaved: the Linear-1 mainloops in between too); without
one it is the producer's own time from the end of its n-th store to the begin of its (n+1)-th.
Measured idle time would understate G under backpressure (the next store waits for the drain), which
is why the offered compute is used where it is known. The last round has no successor: its gap is
unbounded (NaN in the table).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.recurrence import audit_sequence
from xstage_trace.analysis.spans import pair_spans

REMOTE_STORE_EVENTS = ("burst", "rs", "remote_store", "l2_rs")


def remote_store_spans(probes: pd.DataFrame, events=REMOTE_STORE_EVENTS) -> pd.DataFrame:
    """Begin/end pairs of the remote-store events: one row per (dump, slice, tile) with start, end, bytes."""
    keys = ["rank", "dump", "slice", "cta", "event", "tile"]
    s = pair_spans(probes, events, keys).rename(columns={"start": "start_ns", "end": "end_ns", "payload": "bytes"})
    s["dump"] = s["dump"].astype(str)
    return s.drop(columns=["duration"])


def offered_gap_ns(spans: pd.DataFrame, tiles: pd.DataFrame) -> pd.Series:
    """Per remote-store span (sorted by producer and time), the producer's mainloop time from the tile
    after the stored one through its next stored tile (NaN for its last store or an unknown tile)."""
    t = tiles.sort_values(["rank", "dump", "cta", "position"], kind="stable")
    cum = t.groupby(["rank", "dump", "cta"], sort=False)["mainloop_ns"].cumsum()  # C through position p
    pos = t[["rank", "dump", "cta", "tile", "position"]].assign(cum=cum.to_numpy())
    s = spans[["rank", "dump", "cta", "tile"]].merge(pos, on=["rank", "dump", "cta", "tile"], how="left")
    nxt = s.groupby(["rank", "dump", "cta"], sort=False)["cum"].shift(-1)
    return (nxt - s["cum"]).set_axis(spans.index)


def reconstruct_bursts(spans: pd.DataFrame, tiles: pd.DataFrame | None = None) -> pd.DataFrame:
    """Issue rounds per (rank, dump) (see the module text): V_n, K_act,n, start, end, T_iss,n, G_n.
    ``tiles`` (rank, dump, cta, tile, position, mainloop_ns), when given, supplies the offered gap."""
    cols = ["rank", "dump", "burst", "start_ns", "end_ns", "volume_bytes", "producers", "issue_ns", "gap_ns"]
    if spans.empty:
        return pd.DataFrame(columns=cols)
    s = spans.sort_values(["rank", "dump", "cta", "start_ns"], kind="stable").reset_index(drop=True)
    per_producer = s.groupby(["rank", "dump", "cta"], sort=False)
    s["burst"] = per_producer.cumcount()
    if tiles is not None and len(tiles):
        s["own_gap_ns"] = offered_gap_ns(s, tiles)
    else:
        s["own_gap_ns"] = (per_producer["start_ns"].shift(-1) - s["end_ns"]).clip(lower=0.0)
    g = s.groupby(["rank", "dump", "burst"], sort=True)
    out = g.agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), volume_bytes=("bytes", "sum"),
                producers=("cta", "nunique"), gap_ns=("own_gap_ns", "median")).reset_index()
    out["issue_ns"] = out["end_ns"] - out["start_ns"]
    return out[cols]


def audit_bursts(bursts: pd.DataFrame, model: PlatformModel | None) -> pd.DataFrame:
    """Spec §4 on the reconstructed sequence of each (rank, dump): T_iss^0 from the calibration,
    ρ_n, Δb_n, q_n, b_n^iso and the capacity guard. The last burst of a sequence has no successor:
    its gap is taken as unbounded (the path drains after the kernel)."""
    out = bursts.copy()
    for c in ("issue_floor_ns", "rho", "delta_b_bytes", "q_bytes", "b_iso_bytes"):
        out[c] = np.nan
    out["guard_ok"] = pd.Series([None] * len(out), dtype=object)
    if model is None or out.empty:
        return out
    k = out["producers"].to_numpy()
    out["issue_floor_ns"] = model.floor_ns(k, out["volume_bytes"].to_numpy() / np.maximum(k, 1))
    gap = out["gap_ns"].fillna(np.inf).to_numpy()
    cap = model.capacity(k)
    for _, idx in out.groupby(["rank", "dump"]).indices.items():  # one audit per burst sequence (per launch)
        a = audit_sequence(out["volume_bytes"].to_numpy()[idx], gap[idx], out["issue_floor_ns"].to_numpy()[idx],
                           model.rate_gbps, None)
        for c in ("rho", "delta_b_bytes", "q_bytes", "b_iso_bytes"):
            out.loc[out.index[idx], c] = a.table[c].to_numpy()
        if cap is not None:
            out.loc[out.index[idx], "guard_ok"] = (a.table["q_bytes"].to_numpy() + a.table["b_iso_bytes"].to_numpy()) <= cap[idx]
    return out
