"""Chrome trace-event JSON of a run (the fallback for viewers without protobuf support).

``ts``/``dur`` are microseconds relative to the earliest event of the export, with nanosecond
fractions (3 decimals; absolute epochs would lose precision as doubles). Overlapping spans on
one track are packed into lanes (one ``tid`` each), because Perfetto's JSON importer only
accepts properly nested slices per thread.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from xstage_trace.base.output import output_file
from xstage_trace.reports.trace_model import Timeline, pack_lanes

ARG_SKIP = ("track_id", "name", "start_ns", "end_ns", "lane")
INT_ARGS = ("cta", "tile", "expert", "wave", "producers", "correlation_id")


def _track_paths(tracks: pd.DataFrame) -> dict[int, tuple[int, str, tuple]]:
    """track id → (root GPU track id, "SMs / SM 3 / CTA slot 0 / mma" path below the root, sort key)."""
    parent = dict(zip(tracks["track_id"], tracks["parent_id"]))
    name = dict(zip(tracks["track_id"], tracks["name"]))
    order = dict(zip(tracks["track_id"], tracks["order"]))
    out = {}
    for t in tracks["track_id"]:  # one walk per track (hundreds), not per event
        path, key, cur = [], [], t
        while parent[cur] >= 0:
            path.append(str(name[cur]))
            key.append((int(order[cur]), str(name[cur])))
            cur = parent[cur]
        out[int(t)] = (int(cur), " / ".join(reversed(path)), tuple(reversed(key)))
    return out


def span_args(spans: pd.DataFrame) -> list[dict]:
    """Per span, its non-missing argument columns as plain JSON values. Rows are grouped by which
    columns they fill (one group per span kind), so each group converts in one pandas call."""
    cols = [c for c in spans.columns if c not in ARG_SKIP]
    if not cols:
        return [{} for _ in range(len(spans))]
    filled = spans[cols].notna().to_numpy()
    patterns, inverse = np.unique(filled, axis=0, return_inverse=True)
    out: list[dict] = [{}] * len(spans)
    for k, pat in enumerate(patterns):
        idx = np.flatnonzero(inverse.ravel() == k)
        use = [c for c, on in zip(cols, pat) if on]
        values = []
        for c in use:
            v = spans[c].iloc[idx]
            if c in INT_ARGS and v.dtype.kind == "f":
                v = v.astype(np.int64)
            values.append(v.tolist())  # .tolist(): plain Python values, ready for the C JSON encoder
        for i, row in zip(idx.tolist(), zip(*values)):
            out[i] = dict(zip(use, row))
    return out


def chrome_events(tl: Timeline) -> tuple[list[dict], float]:
    """(trace events, t0 in run ns): metadata, complete ('X') slices per lane, counters ('C')."""
    spans = tl.spans.reset_index(drop=True)
    t0 = min(spans["start_ns"].min() if len(spans) else np.inf, tl.counters["t_ns"].min() if len(tl.counters) else np.inf)
    t0 = 0.0 if not np.isfinite(t0) else float(t0)
    lanes = pack_lanes(spans["track_id"].to_numpy(np.int64), spans["start_ns"].to_numpy(float), spans["end_ns"].to_numpy(float))
    paths = _track_paths(tl.tracks)
    roots = tl.tracks[tl.tracks["parent_id"] < 0]
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": int(r.track_id), "tid": 0, "args": {"name": str(r.name)}} for r in roots.itertuples()]
    lane_key = sorted(set(zip(spans["track_id"].astype(int).tolist(), lanes.tolist())), key=lambda tl_: (paths[tl_[0]][2], tl_[1]))
    tid_of = {}
    for k, (track, lane) in enumerate(lane_key, start=1):  # one thread per (track, lane)
        tid_of[(track, lane)] = k
        pid, path, _ = paths[track]
        label = path + (f" · lane {lane}" if lane else "")
        events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": k, "args": {"name": label}},
                   {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": k, "args": {"sort_index": k}}]
    ts = np.round((spans["start_ns"].to_numpy(float) - t0) / 1e3, 3).tolist()
    dur = np.round((spans["end_ns"].to_numpy(float) - spans["start_ns"].to_numpy(float)) / 1e3, 3).tolist()
    args = span_args(spans)
    tracks, names = spans["track_id"].astype(int).tolist(), spans["name"].astype(str).tolist()
    for i, (tr, ln) in enumerate(zip(tracks, lanes.tolist())):  # one event per span
        events.append({"ph": "X", "name": names[i], "pid": paths[tr][0], "tid": tid_of[(tr, ln)], "ts": ts[i], "dur": dur[i], "args": args[i]})
    if len(tl.counters):
        cname = dict(zip(tl.tracks["track_id"], tl.tracks["name"]))
        c = tl.counters
        cts = np.round((c["t_ns"].to_numpy(float) - t0) / 1e3, 3).tolist()
        for tr, t, v in zip(c["track_id"].astype(int).tolist(), cts, c["value"].tolist()):  # one event per counter sample
            events.append({"ph": "C", "name": str(cname[tr]), "pid": paths[tr][0], "tid": 0, "ts": t, "args": {"value": v}})
    return events, t0


PRODUCER_MARK = b'"producer":"xstage-trace"'


def is_chrome_export(path: str | Path) -> bool:
    """True for a Chrome JSON written by ``write_chrome`` (its otherData, at the end, names xstage-trace)."""
    try:
        with open(path, "rb") as fh:
            if not fh.read(16).startswith(b'{"traceEvents":'):
                return False
            fh.seek(max(0, fh.seek(0, 2) - 4096))
            return PRODUCER_MARK in fh.read()
    except OSError:
        return False


def write_chrome(tl: Timeline, path: str | Path) -> dict:
    """Write ``tl`` as Chrome JSON at ``path`` (atomically); returns counts written."""
    events, t0 = chrome_events(tl)
    doc = {"traceEvents": events, "displayTimeUnit": "ns",
           "otherData": {"producer": "xstage-trace", "t0_session_ns": t0, "t0_utc_ns": (tl.epoch_utc_ns + round(t0)) if tl.epoch_utc_ns is not None else None}}
    with output_file(Path(path), "w") as fh:
        fh.write(json.dumps(doc, separators=(",", ":")))  # dumps: the C encoder (dump streams through the Python one)
    return {"events": len(events), "slices": len(tl.spans), "counter_samples": len(tl.counters), "t0_session_ns": t0}
