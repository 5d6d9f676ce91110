"""Burst reconstruction from probe records and the §4 audit of the real burst sequence.

A remote-store span is a begin/end pair of a remote-store event on one slice (the end record's
payload carries the bytes). A burst is one issue round of the producers (docs/model.md §4's V_n): burst n
of a dump is the n-th remote-store span of every producer (CTA) that stores, in the producer's own
time order. For the calibration bench this is its own burst index (the record's tile field); for a
fused kernel it is the n-th Linear-2 epilogue of each CTA, i.e. one expert wave's worth of tiles
when the schedule is aligned. Overlap in time is not used: under backpressure the rounds of
different producers overlap and a transitive chain of overlaps would merge a whole kernel.

Per burst: V_n = Σ bytes, K_act,n = the producers in the round, start = the earliest begin,
end = the latest end, T_iss,n = end − start, and the gap G_n = the median over the round's
producers of each one's offered compute before its next store (docs/model.md §1: the useful producer time
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

from xstage_trace.analysis.calibration_fit import rates_of
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.recurrence import audit_sequence
from xstage_trace.analysis.columnar import (as_text, cumcount, group_cumsum, group_median, group_nunique, lexsort_presorted, run_ids, shift_back,
                                             sort_codes)
from xstage_trace.analysis.spans import join_rows, key_codes, pair_spans, take_matched

REMOTE_STORE_EVENTS = ("burst", "rs", "remote_store", "l2_rs")


def remote_store_spans(probes: pd.DataFrame, events=REMOTE_STORE_EVENTS) -> pd.DataFrame:
    """Begin/end pairs of the remote-store events: one row per (dump, slice, tile) with start, end, bytes."""
    keys = ["rank", "dump", "slice", "cta", "event", "tile"]
    s = pair_spans(probes, events, keys).rename(columns={"start": "start_ns", "end": "end_ns", "payload": "bytes"})
    s["dump"] = as_text(s["dump"])
    return s.drop(columns=["duration"])


def offered_gap_ns(spans: pd.DataFrame, tiles: pd.DataFrame) -> np.ndarray:
    """Per remote-store span (sorted by producer and time), the producer's mainloop time from the tile
    after the stored one through its next stored tile (NaN for its last store or an unknown tile)."""
    n = len(spans)
    rank, dump, cta, tile = (_joint_codes(spans[k], tiles[k]) for k in ("rank", "dump", "cta", "tile"))
    order = lexsort_presorted((tiles["position"].to_numpy(), cta[n:], dump[n:], rank[n:]))  # the tiles by producer and position (tile_spans' order)
    tile_ids = run_ids(rank[n:][order], dump[n:][order], cta[n:][order])
    cum = group_cumsum(tiles["mainloop_ns"].to_numpy(np.float64)[order], tile_ids)  # C through position p
    code = key_codes(pd.DataFrame({"rank": rank, "dump": dump, "cta": cta, "tile": tile}, copy=False), ["rank", "dump", "cta", "tile"])  # of the codes
    li, ri = join_rows(code[:n], code[n:][order], how="left")
    if len(li) != n:
        raise ValueError("the tile table holds a (rank, dump, cta, tile) twice")
    at = take_matched(cum, ri)
    span_ids = run_ids(rank[:n], dump[:n], cta[:n])
    return shift_back(at, span_ids, 1) - at


def _joint_codes(a: pd.Series, b: pd.Series) -> np.ndarray:
    """``sort_codes`` of ``a`` then ``b`` as one column: numbers as they are, without concatenating the columns."""
    if all(c.dtype.kind in "biuf" for c in (a, b)):
        return np.concatenate([sort_codes(a), sort_codes(b)])
    return sort_codes(pd.concat([a, b], ignore_index=True))


def reconstruct_bursts(spans: pd.DataFrame, tiles: pd.DataFrame | None = None) -> pd.DataFrame:
    """Issue rounds per (rank, dump) (see the module text): V_n, K_act,n, start, end, T_iss,n, G_n.
    ``tiles`` (rank, dump, cta, tile, position, mainloop_ns), when given, supplies the offered gap."""
    cols = ["rank", "dump", "burst", "start_ns", "end_ns", "volume_bytes", "producers", "issue_ns", "gap_ns"]
    if spans.empty:
        return pd.DataFrame(columns=cols)
    rank, dump, cta = (sort_codes(spans[k]) for k in ("rank", "dump", "cta"))
    start = spans["start_ns"].to_numpy()
    order = lexsort_presorted((start, cta, dump, rank))  # stable: per producer in time order (the records' own, mostly)
    s = spans.iloc[order].reset_index(drop=True)
    rank, dump, cta, start = rank[order], dump[order], cta[order], start[order]
    end = s["end_ns"].to_numpy()
    producer = run_ids(rank, dump, cta)
    burst = cumcount(producer)
    if tiles is not None and len(tiles):
        own_gap = offered_gap_ns(s, tiles)
    else:
        own_gap = np.maximum(shift_back(start, producer, 1) - end, 0.0)  # NaN stays NaN
    by_burst = np.lexsort((burst, dump, rank))
    ids = run_ids(rank[by_burst], dump[by_burst], burst[by_burst])
    groups = int(ids[-1]) + 1
    bounds = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])  # each burst's first row in by_burst order
    first = by_burst[bounds]
    g = np.empty(len(ids), np.int64)
    g[by_burst] = ids  # the burst group of each span
    out = s[["rank", "dump"]].iloc[first].reset_index(drop=True)
    out["burst"] = burst[first]
    # per burst over its rows in span order (by_burst is stable): the earliest begin, the latest end, the bytes
    out["start_ns"] = np.minimum.reduceat(start[by_burst].astype(np.float64), bounds)
    out["end_ns"] = np.maximum.reduceat(end[by_burst].astype(np.float64), bounds)
    out["volume_bytes"] = np.add.reduceat(s["bytes"].to_numpy().astype(np.int64)[by_burst], bounds)
    out["producers"] = group_nunique(cta, g, groups)
    out["gap_ns"] = group_median(own_gap, g, groups)
    out["issue_ns"] = out["end_ns"] - out["start_ns"]
    return out[cols]


def audit_bursts(bursts: pd.DataFrame, model: PlatformModel | None) -> pd.DataFrame:
    """docs/model.md §4 on the reconstructed sequence of each (rank, dump): T_iss^0 and R (R(K, B) where the
    calibration has it) from the calibration, ρ_n, Δb_n, q_n, b_n^iso and the capacity guard. The last
    burst of a sequence has no successor: its gap is taken as unbounded (the path drains after the kernel)."""
    out = bursts.copy()
    n = len(out)
    audited = {c: np.full(n, np.nan) for c in ("issue_floor_ns", "rho", "delta_b_bytes", "q_bytes", "b_iso_bytes")}
    guard = np.full(n, None, dtype=object)
    if model is not None and n:
        k = out["producers"].to_numpy()
        volume = out["volume_bytes"].to_numpy()
        per_producer = volume / np.maximum(k, 1)
        floor = audited["issue_floor_ns"] = np.asarray(model.floor_ns(k, per_producer), dtype=np.float64)
        rate = rates_of(model, k, per_producer)  # R(K, B) of a version-3 calibration, as its fit predicts
        gap = out["gap_ns"].fillna(np.inf).to_numpy()
        cap = model.capacity(k)
        for idx in out.groupby(["rank", "dump"]).indices.values():  # one audit per burst sequence (per launch)
            a = audit_sequence(volume[idx], gap[idx], floor[idx], rate[idx], None if cap is None else cap[idx])
            for c in ("rho", "delta_b_bytes", "q_bytes", "b_iso_bytes"):
                audited[c][idx] = a.table[c].to_numpy()
            if cap is not None:  # the guard q_n + b_n^iso ≤ Q(K) (without a Q it is not judged: None)
                guard[idx] = a.table["guard_ok"].to_numpy()
    for c, v in audited.items():
        out[c] = v
    out["guard_ok"] = guard
    return out
