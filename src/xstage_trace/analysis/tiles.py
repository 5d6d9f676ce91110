"""Per-tile stall prediction vs measurement (docs/model.md §5) from the probe records of a fused kernel.

Event conventions (instrument/examples/fused_moe.cu and the upstream recipes use them):
- role "mma" (slice role 0): ``slot_wait`` begin/end before a tile's mainloop (tile = the tile about
  to run), ``mainloop`` begin/end, ``tile_info`` mark (payload = kind | expert << 1 | wave << 16,
  kind 1 = Linear-2 with a remote-store epilogue, 0 = Linear-1).
- role "epi" (slice role 1): ``rs`` begin/end around a tile's remote stores (sender-visible span,
  end payload = bytes), ``ls`` begin/end around a local-store epilogue.

With S staging slots, tile i's slot is reused by the tile S positions later on the same CTA; the
mainloops in between cover the epilogue of tile i. With S = 2 that is the successor's mainloop:
T_cover(i) = mainloop(i+1), predicted Δt(i) = [T_lead(i) + T_RS(i) − T_cover(i)]₊ (T_lead: how much
later tile i's store starts than the mainloop covering it; the spec takes 0), measured Δt(i) = the slot
wait before tile i+2, less the wait's own instrumented cost (the control run's median wait).

DeepGEMM's sm_90 GEMMs (recipe ``deepgemm-sm90``: the math role records the tile spans) have another layout
(``DEEPGEMM_SM90``): one staging buffer (shared-memory D) per CTA, and the wait for it
(``store_wait``: ``tma_store_wait<0>`` on the previous tile's TMA store) comes *after* the next
tile's mainloop, just before that tile's epilogue writes D. So S = 1, T_cover(i) = mainloop(i+1)
again, and tile i's measured wait is the ``store_wait`` recorded on tile i+1. ``epilogue`` (STSM and
the TMA store issued; end payload = the tile's bytes) is the tile's store span, ``schedule`` (the
TMA-load warp's mark, payload = group index) names the tile's group (``expert``; 0 for a plain GEMM).
The layout is told by the wait event the dump holds.

Diagnosis per tile (beyond the paper; the slot model cannot see every stall):
- ``slot_backpressure``: the measured slot wait exceeds its floor by more than the noise;
- ``mainloop_inflation``: the tile's mainloop exceeds the control run's mainloops of the same shape,
  tile kind and operand path (their p99) by more than the noise and more than INFLATION_FRACTION — remote stores slowing the
  Tensor Core pipeline directly (e.g. ``st.global`` epilogues whose stalled stores block the SM's
  memory instructions), which leaves the slot wait at its floor;
- ``none`` otherwise (also when no control of that shape was traced: inflation is then not judged).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from xstage_trace.analysis.selection import (linear_quantile_of, median_of, median_ranks, numpy_percentile_of, order_statistics,
                                              quantile_ranks)
from xstage_trace.analysis.columnar import as_text, cumcount, run_ids, shift_back, sort_codes, text_codes
from xstage_trace.analysis.spans import join_rows, key_codes, take_matched
from xstage_trace.analysis.stall_law import predicted_stall_ns

STAGING_SLOTS = 2
MIN_NOISE_NS = 200.0
INFLATION_FRACTION = 0.05  # a mainloop is inflated beyond 5 % (or the noise) over the control's p99


TILE_KEYS = ["rank", "dump", "cta", "tile"]


@dataclass(frozen=True)
class StagingLayout:
    """Which probe events of a kernel hold the staging-slot wait, the store spans and the tile's info,
    and where the wait sits (docs/model.md §5): tile i's slot is reused by tile i + ``slots``; its measured
    wait is that tile's, and T_cover(i) sums the mainloops of tiles i+1 … i+slots−1, plus tile
    i+slots's own when the wait comes after that tile's mainloop (``wait_after_mainloop``)."""

    name: str
    wait_event: str
    remote_store_event: str
    local_store_event: str | None
    info_event: str
    slots: int
    wait_after_mainloop: bool
    tile_kind: str | None  # None: from the info payload (bit 0: Linear-2); else every tile's kind

    @property
    def events(self) -> list[str]:
        """The probe events the tile table reads under this layout."""
        return [e for e in ("mainloop", self.wait_event, self.remote_store_event, self.local_store_event, self.info_event) if e]


FUSED = StagingLayout("fused", "slot_wait", "rs", "ls", "tile_info", STAGING_SLOTS, False, None)
DEEPGEMM_SM90 = StagingLayout("deepgemm-sm90", "store_wait", "epilogue", None, "schedule", 1, True, "gemm")
LAYOUTS = (FUSED, DEEPGEMM_SM90)


def staging_layout(probes: pd.DataFrame) -> StagingLayout:
    """The layout whose wait event the records hold (FUSED when they hold none of them)."""
    present = set(pd.unique(probes["event"]).astype(str))  # the distinct events only, not every row, as text
    return next((lay for lay in LAYOUTS if lay.wait_event in present), FUSED)


def dump_layouts(probes: pd.DataFrame) -> dict[str, str]:
    """Per dump (name as text) the name of ``staging_layout`` of its own records, for dumps whose records
    hold a layout's wait event; a dump missing here holds none of them (FUSED)."""
    codes, names = text_codes(probes["dump"])
    out: dict[str, str] = {}
    for lay in reversed(LAYOUTS):  # the first layout in LAYOUTS whose wait event a dump holds wins
        held = np.bincount(codes[(probes["event"] == lay.wait_event).to_numpy()], minlength=len(names)) > 0
        out.update({names[i]: lay.name for i in np.flatnonzero(held)})
    return out


def store_events(probes: pd.DataFrame) -> tuple[str, ...]:
    """The remote-store span events of the records' layout beyond the burst events every kernel may use
    (DeepGEMM: ``epilogue``, the tile's TMA store)."""
    lay = staging_layout(probes)
    return () if lay is FUSED else (lay.remote_store_event,)


def tile_spans(probes: pd.DataFrame, slots: int | None = None, layout: StagingLayout | None = None) -> pd.DataFrame:
    """The part of the tile table that one dump's records decide on their own: per tile its mainloop,
    slot wait, epilogue span, T_cover, the epilogue lead T_lead and predicted Δt = [T_lead + T_RS −
    T_cover]₊ (docs/model.md §5 plus the measured lead: ``analysis.stall.predicted_stall_ns``).

    Spans are begin/end pairs per (rank, dump, cta, tile); every mainloop span gets its info
    payload, slot wait, remote- and local-store span by key (pandas left-merge semantics: every match,
    in order), then the tiles of each CTA are ordered by mainloop start. ``layout`` defaults to
    ``staging_layout(probes)``, ``slots`` to the layout's. Beside the spans it keeps the start
    times of the tile's own slot wait and epilogue span (``wait_start_ns``, ``epilogue_start_ns``)
    and the remote-store bytes (``rs_bytes``, the remote-store end payload) for the per-tile timeline
    of ``analysis.tile_error``; ``finish_tiles`` does not keep them."""
    if probes.empty or not (probes["event"] == "mainloop").any():
        return pd.DataFrame()
    lay = layout or staging_layout(probes)
    slots = lay.slots if slots is None else slots
    cover_tiles = slots - 1 + int(lay.wait_after_mainloop)
    rows = np.flatnonzero(probes["event"].isin(lay.events).to_numpy())
    p = probes[[*TILE_KEYS, "event", "kind", "payload", "t_ns"]].iloc[rows]
    code = key_codes(p, TILE_KEYS)
    event, kind = p["event"], p["kind"]
    begin, end = (kind == "begin").to_numpy(), (kind == "end").to_numpy()
    t = p["t_ns"].to_numpy()

    def spans(name: str) -> tuple[np.ndarray, np.ndarray]:
        of = (event == name).to_numpy()
        b, e = np.flatnonzero(of & begin), np.flatnonzero(of & end)
        li, ri = join_rows(code[b], code[e])
        return b[li], e[ri]

    mb, me = spans("mainloop")
    info = np.flatnonzero((event == lay.info_event).to_numpy())
    li, ri = join_rows(code[mb], code[info], how="left")
    mb, me = mb[li], me[li]
    payload = take_matched(p["payload"].to_numpy()[info], ri, 0).astype(np.int64)
    cols = {"payload": payload}
    for name, value in ((lay.wait_event, "wait_ns"), (lay.remote_store_event, "rs_ns"), (lay.local_store_event, "ls_ns")):
        b, e = spans(name) if name else (np.zeros(0, np.intp), np.zeros(0, np.intp))
        li, ri = join_rows(code[mb], code[b], how="left")
        mb, me = mb[li], me[li]
        cols = {c: v[li] for c, v in cols.items()}
        cols[value] = take_matched(t[e] - t[b], ri)
        cols[value.replace("_ns", "_start_ns")] = take_matched(t[b], ri)
        if name == lay.remote_store_event:
            cols["rs_bytes"] = take_matched(p["payload"].to_numpy()[e].astype(np.float64), ri)
    start = t[mb]
    rank, dump, cta = (sort_codes(p[c]) for c in ("rank", "dump", "cta"))
    order = np.lexsort((start, cta[mb], dump[mb], rank[mb]))  # stable: ties keep the merge order
    rows, start = mb[order], start[order]
    ids = run_ids(rank[rows], dump[rows], cta[rows])
    mainloop = t[me[order]] - start
    payload = cols["payload"][order]
    wait, rs, ls = (cols[c][order] for c in ("wait_ns", "rs_ns", "ls_ns"))
    wait_start, rs_start, ls_start = (cols[c][order] for c in ("wait_start_ns", "rs_start_ns", "ls_start_ns"))
    cover = sum(shift_back(mainloop, ids, j) for j in range(1, cover_tiles + 1)) if cover_tiles else np.zeros(len(rows))
    epilogue = np.where(np.isnan(rs), ls, rs)
    epilogue_start = np.where(np.isnan(rs), ls_start, rs_start)
    # the store's start relative to the covering mainloop's (next tile's) start; unknown (NaN) where either
    # is missing, and then taken as the spec's 0 in the prediction
    lead = epilogue_start - shift_back(start, ids, 1)
    if lay.tile_kind is None:  # the fused kernels' tile_info: kind | expert << 1 | wave << 16
        is_l2, expert, wave = (payload & 1).astype(bool), (payload >> 1) & 0x7FFF, payload >> 16
    else:  # one kind of tile; the info payload is the group index; no expert waves (wave 0)
        is_l2, expert, wave = np.zeros(len(rows), bool), payload, np.zeros(len(rows), np.int64)
    out = pd.DataFrame({
        "rank": p["rank"].to_numpy()[rows], "dump": as_text(p["dump"].iloc[rows]).array, "cta": p["cta"].to_numpy()[rows],
        "tile": p["tile"].to_numpy()[rows], "mainloop_start_ns": start, "mainloop_end_ns": t[me[order]], "mainloop_ns": mainloop,
        "is_l2": is_l2, "expert": expert, "wave": wave,
        "wait_ns": wait, "rs_ns": rs, "ls_ns": ls, "position": cumcount(ids), "cover_ns": cover,
        "slot_wait_ns": shift_back(wait, ids, slots), "epilogue_span_ns": epilogue,
        "epilogue_lead_ns": lead, "predicted_stall_ns": predicted_stall_ns(epilogue, cover, np.nan_to_num(lead, nan=0.0)),
        "wait_start_ns": wait_start, "epilogue_start_ns": epilogue_start, "rs_bytes": cols["rs_bytes"][order],
    })
    if lay.tile_kind is not None:
        out["tile_kind"] = lay.tile_kind
    return out


def finish_tiles(t: pd.DataFrame, dumps: pd.DataFrame, noise_ns: float | None = None, control: ControlStats | None = None) -> pd.DataFrame:
    """What needs every dump of the run: configuration columns, the slot-wait floor and noise of the
    control runs, measured stall, the backpressured flag and the diagnosis. ``control``: the run's
    control statistics when ``t`` is only part of the run's tiles (a streaming analyze finishes them
    dump by dump); by default they are taken from ``t``."""
    if t.empty:
        return pd.DataFrame()
    t = with_dump_config(t, dumps)
    if "epilogue_lead_ns" not in t:  # spans from elsewhere than tile_spans: no lead was measured
        t["epilogue_lead_ns"] = np.nan
    control = control_stats(t) if control is None else control
    floor_ns = control.floor_ns
    noise_ns = control.noise_ns if noise_ns is None else noise_ns
    # The wait as instrumented costs a fixed time even when the slot is free (begin probe, one
    # flag read, end probe): the control's median. The stall is what exceeds it.
    t["wait_floor_ns"] = floor_ns
    # rounded to whole picoseconds: a wait and the floor converted on different SMs' clocks (ppm-level
    # factors) differ by ~1e-7 ns where the cycle counts are equal; that is not a stall
    t["measured_stall_ns"] = np.maximum(np.round(t["slot_wait_ns"] - floor_ns, 3), 0.0)
    t["noise_ns"] = noise_ns
    t["backpressured"] = (t["predicted_stall_ns"] > noise_ns) | (t["measured_stall_ns"].fillna(0) > noise_ns)
    t["control_mainloop_ns"] = t[CONTROL_KEYS].merge(control.mainloop_p99, on=CONTROL_KEYS, how="left")["ctrl"].set_axis(t.index)
    slot = t["measured_stall_ns"].fillna(0) > noise_ns
    t["diagnosis"] = np.select([slot, mainloop_inflated(t)], ["slot_backpressure", "mainloop_inflation"], "none")
    t = t.rename(columns={"rs_ns": "rs_span_ns"})
    return t[["rank", "dump", "dest", "shape", "schedule", "variant", "cta", "position", "tile", "tile_kind", "expert", "wave", "mainloop_ns", "rs_span_ns",
              "epilogue_span_ns", "cover_ns", "epilogue_lead_ns", "predicted_stall_ns", "slot_wait_ns", "wait_floor_ns", "measured_stall_ns",
              "noise_ns", "backpressured", "control_mainloop_ns", "diagnosis"]]


CONTROL_KEYS = ["shape", "tile_kind", "operands"]


@dataclass(frozen=True)
class ControlStats:
    """What the control runs decide for every tile: slot-wait floor and noise, p99 mainloop per CONTROL_KEYS (column ``ctrl``)."""

    floor_ns: float
    noise_ns: float
    mainloop_p99: pd.DataFrame


def with_dump_config(t: pd.DataFrame, dumps: pd.DataFrame) -> pd.DataFrame:
    """Tile spans with their dump's configuration, ``is_control`` and ``tile_kind``."""
    cfg = dumps[["rank", "dump", "dest", "shape", "schedule", "variant", "operands", "is_control"]]
    cfg = cfg.assign(dump=cfg["dump"].astype(str))  # one column's astype: half the cost of the frame's on a one-row frame
    t = t.merge(cfg, on=["rank", "dump"], how="left")
    t["is_control"] = t["is_control"].fillna(False).astype(bool)
    kind = np.where(t["is_l2"], "linear2", "linear1")  # the fused kernels; a layout with one kind of tile sets its own
    t["tile_kind"] = t["tile_kind"].fillna(pd.Series(kind, index=t.index)) if "tile_kind" in t else kind
    return t


@dataclass
class ControlSample:
    """What the control statistics are taken of, from some control tiles: their slot waits (NaN dropped)
    and, per (shape, tile kind, operand path) — None where a key is missing — their mainloops (NaN
    dropped; a group whose mainloops are all missing holds none). The statistics of the samples of
    disjoint sets of tiles are those of their union (``control_stats_from_samples``)."""

    waits_ns: np.ndarray
    mainloops_ns: dict[tuple, np.ndarray]


def control_sample(tiles: pd.DataFrame | Mapping[str, pd.Series]) -> ControlSample:
    """The control tiles' values in ``tiles`` (with_dump_config's columns, a frame or a mapping of columns)."""
    ctrl = np.asarray(tiles["is_control"], bool)
    waits = tiles["slot_wait_ns"].to_numpy(np.float64)[ctrl]
    keys = [(codes[ctrl], names) for codes, names in (text_codes(tiles[k]) for k in CONTROL_KEYS)]  # -1: missing
    mainloop = tiles["mainloop_ns"].to_numpy(np.float64)[ctrl]
    group = np.zeros(len(mainloop), np.int64)
    for codes, names in keys:
        group = group * (len(names) + 1) + codes + 1  # code -1 (missing) → 0
    groups = {}
    for g in np.unique(group):  # a few: shapes × kinds × operand paths
        v = mainloop[group == g]
        key, rest = [], int(g)
        for codes, names in reversed(keys):
            rest, c = divmod(rest, len(names) + 1)
            key.append(names[c - 1] if c else None)
        groups[tuple(reversed(key))] = v[~np.isnan(v)]
    return ControlSample(waits[~np.isnan(waits)], groups)


def control_stats_from_samples(samples: Callable[[], Iterable[ControlSample]], cap: int) -> ControlStats:
    """Spec §5's control statistics of the control tiles whose samples ``samples()`` yields (anew on every
    call), holding at most ``cap`` values of a sample at once (``selection.order_statistics``): the slot-wait
    floor and noise (``_wait_stats``) and the mainloop p99 per (shape, tile kind, operand path), pandas'
    linear-interpolation quantile (NaN for a group with no mainloop). The same numbers as for one sample of
    all the tiles, whatever the cap."""
    def chunks() -> Iterator[dict]:
        for s in samples():
            yield {"waits": s.waits_ns, **{("mainloop", k): v for k, v in s.mainloops_ns.items()}}

    def ranks_of(name, n: int) -> list[int]:
        return median_ranks(n) + quantile_ranks(n, 0.99) if name == "waits" else quantile_ranks(n, 0.99)

    n, _, found = order_statistics(chunks, ranks_of, cap)
    floor_ns, noise_ns = _wait_stats(found.get("waits", {}), n.get("waits", 0))
    groups = [k for k in n if k != "waits"]
    order = sorted(groups, key=lambda k: tuple((x is not None, x or "") for x in k[1]))  # missing keys first
    rows = [[*k[1], linear_quantile_of(found[k], n[k], 0.99)] for k in order]
    p99 = pd.DataFrame(rows, columns=[*CONTROL_KEYS, "ctrl"]).astype({"ctrl": float, **{k: "str" for k in CONTROL_KEYS}})  # text, NaN where missing
    return ControlStats(floor_ns, noise_ns, p99)


def control_stats(tiles: pd.DataFrame | Mapping[str, pd.Series]) -> ControlStats:
    """The control statistics of ``tiles`` (with_dump_config's columns, a frame or a mapping of columns):
    its control tiles decide them (``control_stats_from_samples`` of their ``control_sample``, held whole)."""
    return control_stats_from_samples(lambda: (control_sample(tiles),), sys.maxsize)


def mainloop_inflated(tiles: pd.DataFrame) -> np.ndarray:
    """Per tile: its mainloop exceeds the control's p99 of the same shape, kind and operand path
    (``control_mainloop_ns``) by more than the noise and more than INFLATION_FRACTION of it; False
    where no control was traced (NaN). Judged whatever the tile's slot wait (``diagnosis`` gives the
    slot wait precedence; Table 3 counts inflated mainloops with this)."""
    ctrl = tiles["control_mainloop_ns"].to_numpy(np.float64)
    excess = tiles["mainloop_ns"].to_numpy(np.float64) - ctrl
    return excess > np.maximum(tiles["noise_ns"].to_numpy(np.float64), INFLATION_FRACTION * ctrl)


def _wait_stats(stats: Mapping[int, float], n: int) -> tuple[float, float]:
    """(floor, noise) of the control runs' ``n`` slot waits (``RunConfig.is_control``: local-store destination
    or ``control=1``; no NaN) from their order statistics. Floor = median raw wait (the cost of the
    instrumented wait itself); noise = p99 of the floor-corrected waits, at least MIN_NOISE_NS (numpy's
    median and percentile, bit for bit). Without a control: (0, MIN_NOISE_NS)."""
    if not n:
        return 0.0, MIN_NOISE_NS
    floor = median_of(stats, n)
    return floor, float(max(numpy_percentile_of(stats, n, 0.99, shift=floor), MIN_NOISE_NS))
