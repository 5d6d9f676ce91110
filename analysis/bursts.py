"""Burst reconstruction from probe records and the §4 audit of the real burst sequence.

A remote-store span is a begin/end pair of a remote-store event on one slice (the end record's
payload carries the bytes). Spans that overlap in time across SMs form one burst: sorted by
start, a new burst begins where a span starts after every earlier span has ended (running max).
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


def reconstruct_bursts(spans: pd.DataFrame) -> pd.DataFrame:
    """Group overlapping spans into bursts per (rank, dump): V_n, K_act,n, start, end, gap to the next burst."""
    cols = ["rank", "dump", "burst", "start_ns", "end_ns", "volume_bytes", "producers", "issue_ns", "gap_ns"]
    if spans.empty:
        return pd.DataFrame(columns=cols)
    s = spans.sort_values(["rank", "dump", "start_ns"], kind="stable").reset_index(drop=True)
    grp = s.groupby(["rank", "dump"], sort=False)
    prev_end = grp["end_ns"].transform(lambda x: x.cummax().shift(1))  # per group, vectorized inside
    new = prev_end.isna() | (s["start_ns"] > prev_end)
    s["burst"] = new.groupby([s["rank"], s["dump"]]).cumsum() - 1
    g = s.groupby(["rank", "dump", "burst"], sort=True)
    out = g.agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), volume_bytes=("bytes", "sum"),
                producers=("cta", "nunique")).reset_index()
    out["issue_ns"] = out["end_ns"] - out["start_ns"]
    nxt = out.groupby(["rank", "dump"])["start_ns"].shift(-1)
    out["gap_ns"] = nxt - out["end_ns"]
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
