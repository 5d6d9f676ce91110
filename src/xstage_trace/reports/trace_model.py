"""A run as timeline tracks, spans and counters: what the Perfetto and Chrome exports draw.

Tracks form a tree per GPU (one per rank): kernels per stream, NVTX per thread, remote-store
bursts, GPU metrics (counters), and SMs → SM n → CTA slot k → role (mma, epilogue). A *CTA
slot* is one of the CTAs resident on an SM at the same time: CTAs of one SM whose probe extents
overlap get different slots. Times are the run's own: nanoseconds since the nsys session start,
probe times already converted per SM (collect), never an assumed clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pandas as pd

from xstage_trace.base.errors import InputError
from xstage_trace.analysis.spans import pair_spans
from xstage_trace.collectors.nsys_names import NVTX_START_END
from xstage_trace.reports.configs import config_names

TILE_EVENTS = {"mainloop": "mainloop", "slot_wait": "slot wait", "rs": "remote store", "ls": "local store"}
ROLE_NAMES = {0: "mma", 1: "epilogue"}


@dataclass
class Timeline:
    """``tracks``: track_id, parent_id (−1 = root), name, kind (group | slice | counter), order;
    ``spans``: track_id, name, start_ns, end_ns plus argument columns (NaN/None = absent);
    ``counters``: track_id, t_ns, value. ``epoch_utc_ns``: UTC of t = 0 where known."""

    tracks: pd.DataFrame
    spans: pd.DataFrame
    counters: pd.DataFrame
    epoch_utc_ns: int | None


def pack_lanes(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per interval so that no two intervals of one group overlap in a lane (greedy, lowest
    free lane). Vectorized where nothing overlaps; the heap only runs over overlapping clusters."""
    n = len(start)
    lanes = np.zeros(n, dtype=np.int64)
    if n == 0:
        return lanes
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    new_group = np.r_[True, g[1:] != g[:-1]]
    # running max end within a group, via a per-group offset that keeps groups apart
    gid = np.cumsum(new_group) - 1
    span = float(np.nanmax(e) - np.nanmin(s) + 1)
    run_end = np.maximum.accumulate(e + gid * span * 2) - gid * span * 2
    prev_end = np.r_[-np.inf, run_end[:-1]]
    starts_cluster = new_group | (s >= prev_end)
    cluster = np.cumsum(starts_cluster) - 1
    sizes = np.bincount(cluster)
    for c in np.flatnonzero(sizes > 1):  # only overlapping clusters need the greedy assignment
        idx = np.flatnonzero(cluster == c)
        free: list[int] = []
        busy: list[tuple[float, int]] = []
        top = 0
        for i in idx:
            while busy and busy[0][0] <= s[i]:
                heapq.heappush(free, heapq.heappop(busy)[1])
            lane = heapq.heappop(free) if free else top
            top += lane == top
            lanes[order[i]] = lane
            heapq.heappush(busy, (e[i], lane))
    return lanes


class _Tracks:
    def __init__(self):
        self.rows: list[dict] = []
        self.ids: dict[tuple, int] = {}

    def get(self, path: tuple, kind: str = "group", order: int = 0) -> int:
        """Track id of ``path`` (a tuple of names), creating parents as groups."""
        if path in self.ids:
            return self.ids[path]
        parent = self.get(path[:-1]) if len(path) > 1 else -1
        tid = len(self.rows)
        self.rows.append({"track_id": tid, "parent_id": parent, "name": path[-1], "kind": kind, "order": order})
        self.ids[path] = tid
        return tid


def _epoch(kernels: pd.DataFrame) -> int | None:
    """UTC minus session time (ns) of the kernels whose UTC start is known; None when none is
    (an export without the session's start time has no wall-clock epoch)."""
    if kernels.empty or "start_utc_ns" not in kernels:
        return None
    known = kernels.dropna(subset=["start_utc_ns", "start_ns"])
    if known.empty:
        return None
    return int(np.median(known["start_utc_ns"].to_numpy(np.int64) - known["start_ns"].to_numpy(np.int64)))


def tile_spans(probes: pd.DataFrame, tiles: pd.DataFrame) -> pd.DataFrame:
    """Begin/end pairs of the tile events per (rank, dump, cta, role, tile) with the tile's
    annotations (kind, expert, wave, predicted / measured stall, backpressured) joined on."""
    keys = ["rank", "dump", "cta", "role", "sm_id", "tile", "event"]
    p = probes.assign(dump=probes["dump"].astype(str))
    s = pair_spans(p, list(TILE_EVENTS), keys).drop(columns=["payload"])
    s["event"] = s["event"].astype(str)
    if len(tiles):
        ann = tiles[["rank", "dump", "cta", "tile", "tile_kind", "expert", "wave", "predicted_stall_ns", "measured_stall_ns", "backpressured"]]
        s = s.merge(ann.assign(tile=ann["tile"].astype(np.int64)), on=["rank", "dump", "cta", "tile"], how="left")
    return s


def build_timeline(run, dump_pattern: str | None = None, metrics: list[str] | None = None) -> Timeline:
    """The run's tracks, spans and counters (module docstring). ``dump_pattern``: glob over dump
    names for the SM tracks (default all); ``metrics``: GPU-metric names (default all)."""
    import fnmatch

    T = _Tracks()
    kernels, nvtx, bursts = run.kernels(), run.nvtx(), run.bursts()
    gpus = dict(zip(kernels["rank"], kernels["device_id"])) if len(kernels) else {}
    gpu_name = (run.manifest.get("gpus") or ["GPU"])[0]

    def gpu(rank) -> tuple:
        return (f"GPU rank {rank} (device {gpus.get(rank, '?')}, {gpu_name})",)

    parts = []
    if len(kernels):
        tid = np.array([T.get(gpu(r) + (f"kernels · stream {s}",), "slice", 0) for r, s in zip(kernels["rank"], kernels["stream_id"])])
        parts.append(pd.DataFrame({"track_id": tid, "name": kernels["short_name"].fillna(kernels["name"]).astype(str),
                                   "start_ns": kernels["start_ns"].astype(float), "end_ns": kernels["end_ns"].astype(float),
                                   "nvtx_range": kernels["nvtx_range"], "nvtx_domain": kernels.get("nvtx_domain"), "grid": kernels["grid_x"].astype(str) + "×" + kernels["grid_y"].astype(str) + "×" + kernels["grid_z"].astype(str),
                                   "block": kernels["block_x"].astype(str) + "×" + kernels["block_y"].astype(str) + "×" + kernels["block_z"].astype(str),
                                   "correlation_id": kernels["correlation_id"]}))
    if len(nvtx):
        n = nvtx.dropna(subset=["end_ns"])
        # push/pop ranges nest per thread; start/end ranges may overlap partially: lanes of their own
        se = (n["event_type"] == NVTX_START_END).to_numpy()
        lane = np.zeros(len(n), dtype=np.int64)
        lane[se] = pack_lanes(n["rank"].to_numpy(np.int64)[se], n["start_ns"].to_numpy(float)[se], n["end_ns"].to_numpy(float)[se])
        # push/pop ranges nest per thread and domain, not across domains: one track per (thread, domain)
        domains = n["domain"].tolist() if "domain" in n else [None] * len(n)
        names_ = [f"NVTX · start/end ranges · lane {ln}" if is_se else f"NVTX · thread {t & 0xFFFFFF}" + (f" · {d}" if pd.notna(d) else "")
                  for is_se, ln, t, d in zip(se.tolist(), lane.tolist(), n["global_tid"].tolist(), domains)]  # one name per range row
        tid = np.array([T.get(gpu(r) + (nm,), "slice", 1) for r, nm in zip(n["rank"], names_)])
        parts.append(pd.DataFrame({"track_id": tid, "name": n["name"].astype(str), "start_ns": n["start_ns"].astype(float), "end_ns": n["end_ns"].astype(float)}))
    slices = run.probe_slices()
    names = pd.Series(config_names(slices["label"]).to_numpy(), index=slices["dump"].to_numpy()) if len(slices) else pd.Series(dtype=str)
    names = names[~names.index.duplicated()]
    if len(bursts):
        tid = np.array([T.get(gpu(r) + ("remote-store bursts",), "slice", 2) for r in bursts["rank"]])
        parts.append(pd.DataFrame({"track_id": tid, "name": "burst " + bursts["burst"].astype(str), "start_ns": bursts["start_ns"], "end_ns": bursts["end_ns"],
                                   "config": bursts["dump"].map(names), "volume_bytes": bursts["volume_bytes"], "producers": bursts["producers"],
                                   "rho": bursts["rho"], "q_bytes": bursts["q_bytes"], "issue_floor_ns": bursts["issue_floor_ns"], "guard_ok": bursts["guard_ok"]}))
    probes = run.probes()
    if len(probes):
        if dump_pattern:
            dump_names = sorted(probes["dump"].astype(str).unique())
            keep = [d for d in dump_names if fnmatch.fnmatchcase(d, dump_pattern)]
            if not keep:
                shown = ", ".join(dump_names[:4]) + (f", … ({len(dump_names)} dumps)" if len(dump_names) > 4 else "")
                raise InputError(run.path, f"--dump {dump_pattern!r} matches none of the run's dumps ({shown})", "pass a glob that matches one of those names, e.g. --dump '*wave*'")
            probes = probes[probes["dump"].astype(str).isin(keep)]
        s = tile_spans(probes, run.tiles()) if len(probes) else pd.DataFrame()
        if len(s):
            ext = s.groupby(["rank", "dump", "cta", "sm_id"], sort=False).agg(start=("start", "min"), end=("end", "max")).reset_index()
            smkey = ext["rank"].to_numpy(np.int64) * 100_000 + ext["sm_id"].to_numpy(np.int64)
            ext["slot"] = pack_lanes(smkey, ext["start"].to_numpy(), ext["end"].to_numpy())
            s = s.merge(ext[["rank", "dump", "cta", "slot"]], on=["rank", "dump", "cta"])
            combos = s[["rank", "sm_id", "slot", "role"]].drop_duplicates()
            for r in combos["rank"].unique():
                T.get(gpu(r) + ("SMs",), "group", 4)
            ids = {(r, sm, sl, ro): T.get(gpu(r) + ("SMs", f"SM {sm}", f"CTA slot {sl}", ROLE_NAMES.get(ro, f"role {ro}")), "slice", int(ro))
                   for r, sm, sl, ro in combos.itertuples(index=False)}
            for r, sm, sl in combos[["rank", "sm_id", "slot"]].drop_duplicates().itertuples(index=False):
                T.rows[T.ids[gpu(r) + ("SMs", f"SM {sm}")]]["order"] = int(sm)
                T.rows[T.ids[gpu(r) + ("SMs", f"SM {sm}", f"CTA slot {sl}")]]["order"] = int(sl)
            tid = pd.MultiIndex.from_frame(s[["rank", "sm_id", "slot", "role"]]).map(ids.get).to_numpy()
            kind = s["tile_kind"].fillna("") if "tile_kind" in s else ""
            name = s["event"].map(TILE_EVENTS) + np.where(s["event"] == "mainloop", " " + kind, "")
            parts.append(pd.DataFrame({"track_id": tid.astype(np.int64), "name": name.str.strip(), "start_ns": s["start"], "end_ns": s["end"],
                                       "config": s["dump"].map(names), "cta": s["cta"], "tile": s["tile"], "expert": s.get("expert"), "wave": s.get("wave"),
                                       "predicted_stall_ns": s.get("predicted_stall_ns"), "measured_stall_ns": s.get("measured_stall_ns"),
                                       "backpressured": s.get("backpressured")}))
    spans = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["track_id", "name", "start_ns", "end_ns"])
    gm = run.gpu_metrics()
    if metrics:
        gm = gm[gm["metric"].astype(str).isin(metrics)]
    counters = pd.DataFrame(columns=["track_id", "t_ns", "value"])
    if len(gm):
        combos = gm[["rank", "metric"]].astype({"metric": str}).drop_duplicates()
        ids = {(r, m): T.get(gpu(r) + (f"{m}",), "counter", 3) for r, m in combos.itertuples(index=False)}
        tid = pd.MultiIndex.from_arrays([gm["rank"], gm["metric"].astype(str)]).map(ids.get).to_numpy()
        counters = pd.DataFrame({"track_id": tid.astype(np.int64), "t_ns": gm["timestamp_ns"].astype(float).to_numpy(), "value": gm["value"].to_numpy()})
    return Timeline(pd.DataFrame(T.rows), spans, counters, _epoch(kernels))
