"""xstage-trace export: the written Perfetto protobuf and Chrome JSON parsed back and checked
against the run's own tables (counts, nanosecond times, nesting), not against bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from xstage_trace import open_run
from xstage_trace.reports.trace_model import pack_lanes

DUMP_GLOB = "*host_S1_wave*"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "xstage_trace", *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def exported(fused_run, tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    for fmt, name in (("perfetto", "t.pftrace"), ("chrome", "t.json")):
        r = cli("export", fused_run, "--format", fmt, "-o", d / name, "--dump", DUMP_GLOB, "--metric", "SM Active", "--metric", "PCIe TX")
        assert r.returncode == 0, r.stderr
    return d


@pytest.fixture(scope="module")
def perfetto_trace(exported):
    t = Trace()
    t.ParseFromString((exported / "t.pftrace").read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in t.packet if p.HasField("track_descriptor")}
    events = [(p.timestamp, p.track_event) for p in t.packet if p.HasField("track_event")]
    return tracks, events


def _slices(events):
    """(track uuid, name, begin ts, end ts, annotations) of every slice, checking nesting per track."""
    stacks, out = defaultdict(list), []
    for ts, e in events:
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            stacks[e.track_uuid].append((ts, e))
        elif e.type == TrackEvent.TYPE_SLICE_END:
            b_ts, b = stacks[e.track_uuid].pop()  # IndexError = an end without a begin
            assert ts >= b_ts
            ann = {a.name: getattr(a, a.WhichOneof("value")) for a in b.debug_annotations}
            out.append((e.track_uuid, b.name, b_ts, ts, ann))
    assert all(not s for s in stacks.values())
    return out


def _path(tracks, uuid):
    names = []
    while uuid in tracks:
        names.append(tracks[uuid].name)
        uuid = tracks[uuid].parent_uuid if tracks[uuid].HasField("parent_uuid") else None
    return list(reversed(names))


def test_perfetto_kernels_in_real_nanoseconds(fused_run, perfetto_trace):
    tracks, events = perfetto_trace
    run = open_run(fused_run)
    k = run.kernels()
    sl = [s for s in _slices(events) if _path(tracks, s[0])[1].startswith("kernels")]
    assert len(sl) == len(k)
    offset = int(np.median(k["start_utc_ns"] - k["start_ns"]))  # the run's UTC epoch of t = 0
    got = sorted((b - offset, e - b) for _, _, b, e, _ in sl)
    assert got == sorted(zip(k["start_ns"].tolist(), k["duration_ns"].tolist()))


def test_perfetto_tile_spans_per_sm_and_cta_slot(fused_run, perfetto_trace):
    tracks, events = perfetto_trace
    run = open_run(fused_run)
    p = run.probes()
    p = p[p["dump"].astype(str).str.contains("host_S1_wave")]
    begins = p[p["kind"].astype(str) == "begin"]
    sl = [s for s in _slices(events) if "SMs" in _path(tracks, s[0])]
    by_event = defaultdict(int)
    for _, name, *_ in sl:
        by_event[name.split(" linear")[0]] += 1
    want = begins["event"].astype(str).value_counts()
    assert by_event == {"mainloop": want["mainloop"], "slot wait": want["slot_wait"], "remote store": want["rs"], "local store": want["ls"]}
    # every SM that ran the dump has its own track, with CTA slot tracks below it
    sm_tracks = {tracks[u].name for u in tracks if _path(tracks, u)[1:2] == ["SMs"] and len(_path(tracks, u)) == 3}
    assert sm_tracks == {f"SM {s}" for s in p["sm_id"].unique()}
    assert {tuple(_path(tracks, u)[3:4]) for u, *_ in sl} == {("CTA slot 0",)}  # one CTA per SM in this kernel
    # mainloop starts are the probe times (real ns, converted per SM), not a re-derived clock
    offset = int(np.median(run.kernels()["start_utc_ns"] - run.kernels()["start_ns"]))
    ml = begins[begins["event"].astype(str) == "mainloop"]["t_ns"].to_numpy()
    assert sorted(b - offset for _, n, b, *_ in sl if n.startswith("mainloop")) == sorted(np.rint(ml).astype(np.int64).tolist())
    # stall and backpressure ride along as debug annotations: one mainloop per tile
    tiles = run.tiles()
    tiles = tiles[tiles["dump"].str.contains("host_S1_wave")]
    assert sum(1 for *_, a in sl if a.get("backpressured") is True and "predicted_stall_ns" in a) >= 1
    flagged = sum(1 for _, n, *_, a in sl if n.startswith("mainloop") and a.get("backpressured") is True)
    assert flagged == int(tiles["backpressured"].sum())


def test_perfetto_bursts_and_metric_counters(fused_run, perfetto_trace):
    tracks, events = perfetto_trace
    run = open_run(fused_run)
    sl = [s for s in _slices(events) if _path(tracks, s[0])[-1] == "remote-store bursts"]
    assert len(sl) == len(run.bursts())
    counts = defaultdict(int)
    for _, e in events:
        if e.type == TrackEvent.TYPE_COUNTER:
            counts[tracks[e.track_uuid].name] += 1
    gm = run.gpu_metrics()["metric"].astype(str).value_counts()
    assert dict(counts) == {"SM Active": gm["SM Active"], "PCIe TX": gm["PCIe TX"]}


def test_chrome_json_lanes_and_relative_microseconds(fused_run, exported, perfetto_trace):
    doc = json.loads((exported / "t.json").read_text())
    ev = doc["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    assert len(x) == len(_slices(perfetto_trace[1]))
    lanes = defaultdict(list)
    for e in x:
        lanes[(e["pid"], e["tid"])].append((e["ts"], e["dur"]))
        assert round(e["ts"], 3) == e["ts"] and e["ts"] >= 0
    for spans in lanes.values():  # no overlap inside a lane (Perfetto's JSON importer needs that)
        spans.sort()
        ends = np.array([t + d for t, d in spans[:-1]])
        assert np.all(np.array([t for t, _ in spans[1:]]) >= ends - 1e-3)
    k = open_run(fused_run).kernels()
    t0 = doc["otherData"]["t0_session_ns"]
    kx = sorted(e["ts"] * 1e3 + t0 for e in x if e["name"] == "fused_moe_kernel")
    np.testing.assert_allclose(kx, sorted(k[k["short_name"] == "fused_moe_kernel"]["start_ns"]), atol=0.51)


def test_pack_lanes_by_hand():
    s = np.array([0, 5, 10, 12, 0, 100.0])
    e = np.array([10, 15, 20, 13, 50, 110.0])
    g = np.array([0, 0, 0, 0, 1, 0])
    # group 0: [0,10]→0, [5,15]→1, [10,20] reuses 0, [12,13] finds 0 and 1 busy → 2; [100,110] alone → 0
    assert pack_lanes(g, s, e).tolist() == [0, 1, 0, 2, 0, 0]


def test_export_rejects_an_unknown_format_and_a_folder_that_is_no_run(fused_run, tmp_path):
    r = cli("export", fused_run, "--format", "svg", "-o", tmp_path / "x")
    assert r.returncode == 2 and "--format" in r.stderr and not (tmp_path / "x").exists()
    r = cli("export", tmp_path, "--format", "chrome", "-o", tmp_path / "y.json")
    assert r.returncode == 2 and not (tmp_path / "y.json").exists()


def test_overlapping_start_end_nvtx_ranges_get_lanes():
    from types import SimpleNamespace

    import pandas as pd

    from xstage_trace.reports.trace_model import build_timeline

    empty = pd.DataFrame(columns=["rank", "device_id", "metric", "timestamp_ns", "value"])
    nvtx = pd.DataFrame({"rank": 0, "name": ["a", "b", "c"], "start_ns": [0, 5, 20], "end_ns": [10, 15, 30],
                         "event_type": [60, 60, 59], "global_tid": [7, 8, 7], "domain_id": 0})
    k = pd.DataFrame(columns=["rank", "device_id", "stream_id"])
    run = SimpleNamespace(kernels=lambda: k, nvtx=lambda: nvtx, bursts=lambda: pd.DataFrame(), probes=lambda: pd.DataFrame(),
                          probe_slices=lambda: pd.DataFrame(), gpu_metrics=lambda: empty, manifest={})
    tl = build_timeline(run)
    names = dict(zip(tl.tracks["track_id"], tl.tracks["name"]))
    got = {n: names[t] for n, t in zip(tl.spans["name"], tl.spans["track_id"])}
    # a and b overlap partially (start/end ranges): two lanes; c is a push/pop range on its thread
    assert got == {"a": "NVTX · start/end ranges · lane 0", "b": "NVTX · start/end ranges · lane 1", "c": "NVTX · thread 7"}


def test_epoch_is_unknown_without_utc_starts_and_ignores_missing_ones():
    """An export without the session's UTC start has no epoch (None, not a cast of NaN); rows
    without a UTC start do not enter the median of the others."""
    import pandas as pd
    from xstage_trace.reports.trace_model import _epoch
    none_known = pd.DataFrame({"start_ns": [10, 20], "start_utc_ns": pd.array([None, None], dtype="Int64")})
    assert _epoch(none_known) is None
    some = pd.DataFrame({"start_ns": [10, 20, 30], "start_utc_ns": pd.array([1_010, None, 1_030], dtype="Int64")})
    assert _epoch(some) == 1_000
