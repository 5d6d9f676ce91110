"""Perfetto TrackEvent protobuf of a run (``perfetto.trace_builder``): nested track descriptors,
slice begin/end events with debug annotations, counters; timestamps in real nanoseconds (UTC
epoch where the run knows it, so that Perfetto shows wall-clock time)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackDescriptor, TracePacket, TrackEvent
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from xstage_trace.base.output import output_file
from xstage_trace.reports.trace_model import Timeline

SEQUENCE_ID = 1
UUID_BASE = 0x58535447 << 24  # "XSTG": keeps our track uuids apart from other producers'
ARG_COLUMNS_SKIP = ("track_id", "name", "start_ns", "end_ns")


INT_ARGS = ("cta", "tile", "expert", "wave", "producers", "correlation_id")


def _arg_columns(spans: pd.DataFrame) -> list[tuple[str, str, list]]:
    """(name, protobuf field, values as Python objects with None for missing) per argument column."""
    out = []
    for c in spans.columns:
        if c in ARG_COLUMNS_SKIP:
            continue
        col = spans[c]
        valid = col.notna().to_numpy()
        if not valid.any():
            continue
        sample = col[valid].iloc[0]
        if isinstance(sample, (bool, np.bool_)):
            field, vals = "bool_value", [bool(v) if ok else None for v, ok in zip(col.tolist(), valid)]
        elif c in INT_ARGS or isinstance(sample, (int, np.integer)):
            field, vals = "int_value", [int(v) if ok else None for v, ok in zip(col.tolist(), valid)]
        elif isinstance(sample, (float, np.floating)):
            field, vals = "double_value", [float(v) if ok else None for v, ok in zip(col.tolist(), valid)]
        else:
            field, vals = "string_value", [str(v) if ok else None for v, ok in zip(col.tolist(), valid)]
        out.append((c, field, vals))
    return out


def is_perfetto_export(path: str | Path) -> bool:
    """True for a Perfetto trace written by ``write_perfetto``: its first packet describes a track
    whose uuid carries UUID_BASE (how ``export --force`` tells its own earlier output)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
        if not head.startswith(b"\x0a"):  # field 1 (packet), length-delimited
            return False
        size, pos, shift = 0, 1, 0
        while pos < len(head) and shift < 35:
            byte = head[pos]
            size |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not byte & 0x80:
                break
        trace = Trace.FromString(head[: pos + size])
    except Exception:  # not a file, not protobuf: not ours
        return False
    return bool(trace.packet) and trace.packet[0].track_descriptor.uuid >> 24 == UUID_BASE >> 24


def write_perfetto(tl: Timeline, path: str | Path) -> dict:
    """Write ``tl`` as a Perfetto protobuf trace at ``path`` (atomically); returns counts written."""
    offset = tl.epoch_utc_ns if tl.epoch_utc_ns is not None else -int(min(tl.spans["start_ns"].min() if len(tl.spans) else 0,
                                                                         tl.counters["t_ns"].min() if len(tl.counters) else 0))
    uuid = {int(t): UUID_BASE + int(t) + 1 for t in tl.tracks["track_id"]}
    spans = tl.spans.reset_index(drop=True)
    ts_b = np.rint(spans["start_ns"].to_numpy(float)).astype(np.int64) + offset
    ts_e = np.maximum(np.rint(spans["end_ns"].to_numpy(float)).astype(np.int64) + offset, ts_b)
    # all slice edges in time order; at equal times an end goes before a begin (back-to-back spans)
    n = len(spans)
    ts = np.r_[ts_b, ts_e]
    is_begin = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    row = np.r_[np.arange(n), np.arange(n)]
    # ties: ends of later-begun spans first, then begins of later-ending spans first (nesting holds)
    tie = np.r_[-ts_e, -ts_b]
    order = np.lexsort((tie, is_begin, ts))
    arg_cols = _arg_columns(spans)
    names = spans["name"].astype(str).tolist()
    track_uuid = [uuid[t] for t in spans["track_id"].astype(int).tolist()]
    ts_l, row_l, begin_l = ts[order].tolist(), row[order].tolist(), is_begin[order].tolist()
    counters = tl.counters
    c_ts = np.rint(counters["t_ns"].to_numpy(float)).astype(np.int64) + offset
    c_tr = counters["track_id"].to_numpy(np.int64)
    c_val = counters["value"].to_numpy(float)
    with output_file(Path(path), "wb") as fh:
        b = StreamingTraceProtoBuilder(fh)
        first = True
        for t in tl.tracks.itertuples(index=False):  # descriptors first
            p = b.create_packet()
            if first:
                p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
                first = False
            p.trusted_packet_sequence_id = SEQUENCE_ID
            d = p.track_descriptor
            d.uuid = uuid[t.track_id]
            d.name = str(t.name)
            if t.parent_id >= 0:
                d.parent_uuid = uuid[t.parent_id]
            d.sibling_order_rank = int(t.order)
            d.child_ordering = TrackDescriptor.EXPLICIT
            if t.kind == "counter":
                d.counter.SetInParent()  # a counter track (values in the metric's own unit)
            b.write_packet(p)
        for t, r, begin in zip(ts_l, row_l, begin_l):  # one packet per slice edge
            p = b.create_packet()
            p.trusted_packet_sequence_id = SEQUENCE_ID
            p.timestamp = t
            e = p.track_event
            e.track_uuid = track_uuid[r]
            if begin:
                e.type = TrackEvent.TYPE_SLICE_BEGIN
                e.name = names[r]
                for name, field, vals in arg_cols:  # debug annotations: the span's non-missing arguments
                    v = vals[r]
                    if v is not None:
                        a = e.debug_annotations.add()
                        a.name = name
                        setattr(a, field, v)
            else:
                e.type = TrackEvent.TYPE_SLICE_END
            b.write_packet(p)
        c_order = np.argsort(c_ts, kind="stable")
        c_uuid = {t: uuid[t] for t in set(c_tr.tolist())}
        for t, tr, v in zip(c_ts[c_order].tolist(), c_tr[c_order].tolist(), c_val[c_order].tolist()):  # one packet per counter sample
            p = b.create_packet()
            p.trusted_packet_sequence_id = SEQUENCE_ID
            p.timestamp = t
            p.track_event.type = TrackEvent.TYPE_COUNTER
            p.track_event.track_uuid = c_uuid[tr]
            p.track_event.double_counter_value = v
            b.write_packet(p)
    return {"tracks": len(tl.tracks), "slices": n, "counter_samples": len(counters), "timestamp_offset_ns": int(offset)}
