"""Per-tile stall prediction vs measurement (docs/model.md §5, §12) from the probe records of any
instrumented kernel, read through its tile lifecycle (``base.lifecycle.TileLifecycle``: which events
are the compute span, the store span, the staging-buffer wait and the tile's info).

With S staging slots, tile i's slot is reused by the tile S positions later on the same CTA; the
compute spans in between cover the epilogue of tile i. With S = 2 (the reference fused kernel) that is
the successor's mainloop: T_cover(i) = mainloop(i+1), predicted Δt(i) = [T_lead(i) + T_RS(i) −
T_cover(i)]₊ (T_lead: how much later tile i's store starts than the mainloop covering it; the model
takes 0), measured Δt(i) = the slot wait before tile i+2, less the wait's own instrumented cost (the
control run's median wait). With one staging buffer whose wait comes after the next tile's mainloop
(DeepGEMM sm_90) S = 1 and T_cover(i) = mainloop(i+1) again; tile i's measured wait is the one
recorded on tile i+1. A lifecycle whose store span holds the wait (FlashAttention: the O store is issued
and waited inside the epilogue) measures it as the store span beyond the control's median store span.

Measured stall (docs/model.md §12): a tile's ``stall_ns`` counts its slot wait beyond the control's floor
(``measured_stall_ns``, the paper's measured Δt; for a wait inside the store span, that span beyond the control's
median where it is beyond the control's spread: its p99 by more than the noise and INFLATION_FRACTION) and its compute span beyond the control's
(``compute_stall_ns``: the mainloop minus the control's median mainloop of the same tile id — the same work —
counted where the mainloop is inflated: beyond that median plus the control's own per-tile spread by more than the
noise and more than INFLATION_FRACTION; Eq. 46. Where the control has no tile of that id, the median and p99 of the
control's mainloops of the same shape, tile kind and operand path stand in), so a mainloop stretched by pending
remote stores is a stall too. The control's mainloops are taken in SM clock cycles and converted at the tile's own
launch clock (Eq. 46a, ``ns_per_cycle``): a host-mapped launch runs its SMs faster than its HBM control. The
control is the run's local-store (HBM) launch of the same configuration (``RunConfig.is_control``);
without one the compute part is not judged (NaN), and without any control in the run the slot-wait
floor is unknown and the measured stall is NaN, never 0.

Diagnosis per tile:
- ``slot_backpressure``: the measured slot wait exceeds its floor by more than the noise;
- ``mainloop_inflation``: the tile's compute span is inflated against the control's (above) —
  remote stores slowing the Tensor Core pipeline directly (an ``st.global`` epilogue's stalled stores
  block the SM's memory instructions; pending host writes hold up the next tile's operand loads,
  docs/model.md §11), which leaves the slot wait at its floor;
- ``none`` otherwise (also when no control of that shape was traced: inflation is then not judged).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from xstage_trace.analysis.selection import (linear_quantile_of, median_of, median_ranks, numpy_percentile_of, order_statistics,
                                              quantile_ranks)
from xstage_trace.analysis.columnar import (as_text, cumcount, group_median, lexsort_presorted, text_of_codes, run_ids, shift_back, sort_codes,
                                             text_codes, value_mask)
from xstage_trace.analysis.spans import join_rows, key_codes, take_matched
from xstage_trace.analysis.stall_law import predicted_stall_ns
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.base.lifecycle import TileLifecycle

STAGING_SLOTS = 2
MIN_NOISE_NS = 200.0
INFLATION_FRACTION = 0.05  # a mainloop is inflated beyond 5 % (or the noise) over the control's (Eq. 46)


TILE_KEYS = ["rank", "dump", "cta", "tile"]


def tile_spans(probes: pd.DataFrame, lifecycle: TileLifecycle, slots: int | None = None) -> pd.DataFrame:
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
    lay = lifecycle
    slots = lay.slots if slots is None else slots
    cover_tiles = slots - 1 + int(lay.wait_after_mainloop)
    sel = np.flatnonzero(value_mask(probes["event"], lay.events))  # the lifecycle's records
    code = key_codes(probes, TILE_KEYS)[sel]
    event, event_names = text_codes(probes["event"])
    event = event[sel]
    kind, kind_names = text_codes(probes["kind"])
    begin, end = (kind[sel] == (kind_names.index(k) if k in kind_names else -2) for k in ("begin", "end"))
    t = probes["t_ns"].to_numpy()[sel]
    payload_of = probes["payload"].to_numpy()[sel]

    def of_event(name: str) -> np.ndarray:
        return event == (event_names.index(name) if name in event_names else -2)

    def spans(name: str) -> tuple[np.ndarray, np.ndarray]:
        of = of_event(name)
        b, e = np.flatnonzero(of & begin), np.flatnonzero(of & end)
        li, ri = join_rows(code[b], code[e])
        return b[li], e[ri]

    mb, me = spans("mainloop")
    info = np.flatnonzero(of_event(lay.info_event)) if lay.info_event else np.zeros(0, np.intp)
    li, ri = join_rows(code[mb], code[info], how="left")
    mb, me = mb[li], me[li]
    payload = take_matched(payload_of[info], ri, 0).astype(np.int64)
    cols = {"payload": payload}
    for name, value in ((lay.wait_event, "wait_ns"), (lay.store_event, "rs_ns"), (lay.local_store_event, "ls_ns")):
        b, e = spans(name) if name else (np.zeros(0, np.intp), np.zeros(0, np.intp))
        li, ri = join_rows(code[mb], code[b], how="left")
        mb, me = mb[li], me[li]
        cols = {c: v[li] for c, v in cols.items()}
        cols[value] = take_matched(t[e] - t[b], ri)
        cols[value.replace("_ns", "_start_ns")] = take_matched(t[b], ri)
        if name == lay.store_event:
            cols["rs_bytes"] = take_matched(payload_of[e].astype(np.float64), ri)
    start = t[mb]
    rank, dump, cta = (sort_codes(probes[c])[sel] for c in ("rank", "dump", "cta"))
    order = lexsort_presorted((start, cta[mb], dump[mb], rank[mb]))  # stable: ties keep the merge order
    rows, start = mb[order], start[order]
    ids = run_ids(rank[rows], dump[rows], cta[rows])
    mainloop = t[me[order]] - start
    clock = probes["clock"].to_numpy()[sel] if "clock" in probes else None
    # the difference in the clock's own integers first: float64 clock64 values past 2^53 cycles lose whole cycles
    cycles = (clock[me[order]] - clock[mb[order]]).astype(np.float64) if clock is not None else np.full(len(rows), np.nan)
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
        "rank": probes["rank"].to_numpy()[sel[rows]], "dump": as_text(probes["dump"].iloc[sel[rows]]).array,
        "cta": probes["cta"].to_numpy()[sel[rows]], "tile": probes["tile"].to_numpy()[sel[rows]], "mainloop_start_ns": start, "mainloop_end_ns": t[me[order]], "mainloop_ns": mainloop,
        "ns_per_cycle": launch_ns_per_cycle(dump[rows] * (int(rank.max(initial=0)) + 1) + rank[rows], mainloop, cycles),
        "is_l2": is_l2, "expert": expert, "wave": wave,
        "wait_ns": wait, "rs_ns": rs, "ls_ns": ls, "position": cumcount(ids), "cover_ns": cover,
        "slot_wait_ns": shift_back(wait, ids, slots), "epilogue_span_ns": epilogue,
        "epilogue_lead_ns": lead, "predicted_stall_ns": predicted_stall_ns(epilogue, cover, np.nan_to_num(lead, nan=0.0)),
        "wait_start_ns": wait_start, "epilogue_start_ns": epilogue_start, "rs_bytes": cols["rs_bytes"][order],
        "cover_tiles": np.full(len(rows), cover_tiles, np.int8), "wait_in_store": np.full(len(rows), lay.wait_in_store_span),
        "plain_store": np.full(len(rows), lay.plain_stores),
    })
    if lay.tile_kind is not None:
        out["tile_kind"] = lay.tile_kind
    return out


def launch_ns_per_cycle(launch: np.ndarray, mainloop_ns: np.ndarray, mainloop_cycles: np.ndarray) -> np.ndarray:
    """docs/model.md Eq. 46a: per tile the SM clock period of its launch (ns per cycle): the median over the
    launch's tiles of mainloop ns / mainloop clock cycles (the probes' %globaltimer against their clock64; every
    tile of a launch runs at the launch's clock to ppm). 1 where a launch records no cycles (its spans are then
    compared in ns)."""
    ratio = np.where(mainloop_cycles > 0, mainloop_ns / np.where(mainloop_cycles > 0, mainloop_cycles, 1.0), np.nan)
    keys, med = _medians_by(launch, ratio)
    out = med[np.searchsorted(keys, launch)] if len(keys) else np.ones(len(launch))
    return np.where(np.isnan(out), 1.0, out)


def finish_tiles(t: pd.DataFrame, dumps: pd.DataFrame, noise_ns: float | None = None, control: ControlStats | None = None,
                 models: Mapping[str, object] | None = None) -> pd.DataFrame:
    """What needs every dump of the run (docs/model.md §5, §12): configuration columns, the slot-wait floor
    and noise of the control runs, measured stall (slot wait and compute span beyond the control's), the
    backpressured flag, the diagnosis and, for the destinations ``models`` calibrates, the forward
    prediction (``models``: dest → (PlatformModel, forward.LinkModel or None)): §11's
    (``analysis.stall.forward_link_stall_ns``) where the calibration has a path-drain link model and the operands are
    loaded from global memory, else the §4 recurrence's (``analysis.stall.forward_stall_ns``). ``control``: the run's control statistics when ``t``
    is only part of the run's tiles (a streaming analyze finishes them dump by dump); by default they are
    taken from ``t``."""
    if t.empty:
        return pd.DataFrame()
    t = with_dump_config(t, dumps)
    n = len(t)
    lead = t["epilogue_lead_ns"].to_numpy(np.float64) if "epilogue_lead_ns" in t else np.full(n, np.nan)  # NaN: spans from elsewhere than tile_spans
    control = control_stats(t) if control is None else control
    floor_ns = control.floor_ns
    noise_ns = control.noise_ns if noise_ns is None else noise_ns
    # The wait as instrumented costs a fixed time even when the slot is free (begin probe, one
    # flag read, end probe): the control's median. The stall is what exceeds it. Without any control
    # wait the floor is unknown: no measured slot stall (NaN), never the raw wait.
    slot_wait = t["slot_wait_ns"].to_numpy(np.float64)
    # rounded to whole picoseconds: a wait and the floor converted on different SMs' clocks (ppm-level
    # factors) differ by ~1e-7 ns where the cycle counts are equal; that is not a stall
    measured = np.maximum(np.round(slot_wait - floor_ns, 3), 0.0) if control.waits else np.full(n, np.nan)
    groups = _combined_keys([text_codes(t[k]) for k in CONTROL_KEYS])  # each tile's CONTROL_KEYS group, for both lookups
    ctrl = _control_lookup(groups, control.mainloop_p99)
    if "wait_in_store" in t and t["wait_in_store"].any():  # the wait is inside the store span: its excess over the control's
        in_store = t["wait_in_store"].to_numpy(bool)
        span = t["rs_ns"].to_numpy(np.float64)
        p99 = ctrl["ctrl_store_p99"]
        longer = span - p99 > np.maximum(noise_ns, INFLATION_FRACTION * p99)  # beyond the control's spread, as for mainloops
        excess = np.where(np.isnan(p99), np.nan, np.where(longer, np.round(span - ctrl["ctrl_store_median"], 3), 0.0))
        measured = np.where(in_store, excess, measured)
    slot = np.where(np.isnan(measured), 0.0, measured) > noise_ns
    predicted = t["predicted_stall_ns"].to_numpy(np.float64)
    # the per-tile control where the control traced a tile of the same id (the same work: a causal attention block, a
    # GEMM tile of its K), else the group's median and p99
    tile_ml, tile_ep, jitter = _tile_control_lookup(groups, t, control.per_tile)
    matched = ~np.isnan(tile_ml)
    # the control's compute in cycles, at this tile's clock (Eq. 46a: a launch stalled behind its stores runs its SMs
    # at a higher clock than its HBM control, whose Tensor Cores never idle)
    period = t["ns_per_cycle"].to_numpy(np.float64) if "ns_per_cycle" in t else np.ones(n)
    ctrl_p99 = np.where(matched, tile_ml + jitter, ctrl["ctrl"]) * period
    ctrl_median = np.where(matched, tile_ml, ctrl["ctrl_median"]) * period
    mainloop = t["mainloop_ns"].to_numpy(np.float64)
    noise = np.full(n, float(noise_ns))
    inflated = mainloop_inflated(pd.DataFrame({"control_mainloop_ns": ctrl_p99, "mainloop_ns": mainloop, "noise_ns": noise}, copy=False))
    compute = compute_stall_ns(mainloop, ctrl_median, inflated)
    # a tile of a launch that records slot waits but whose own wait was not recorded (no successor) has no measured stall
    launch = text_codes(t["dump"])[0]
    waits = ~np.isnan(slot_wait)
    unmeasured = ~waits & (np.bincount(launch[waits], minlength=launch.max(initial=-1) + 1) > 0)[launch]
    from xstage_trace.analysis.stall import forward_link_stall_ns, forward_stall_ns

    models = models or {}
    spans = t.rename(columns={"rs_ns": "rs_span_ns"})
    spans["control_compute_ns"] = ctrl_median
    spans["control_epilogue_ns"] = tile_ep
    link = forward_link_stall_ns(spans, {d: m[1] for d, m in models.items() if m[1] is not None})
    recurrence = forward_stall_ns(spans, {d: m[0] for d, m in models.items()})
    cols = {c: t[c].array for c in ("rank", "dump", "dest", "shape", "schedule", "variant", "cta", "position", "tile", "tile_kind", "expert", "wave",
                                    "mainloop_ns")}
    cols.update({"rs_span_ns": t["rs_ns"].array, "epilogue_span_ns": t["epilogue_span_ns"].array, "cover_ns": t["cover_ns"].array,
                 "epilogue_lead_ns": lead, "predicted_stall_ns": predicted, "slot_wait_ns": slot_wait,
                 "wait_floor_ns": np.full(n, floor_ns if control.waits else np.nan), "measured_stall_ns": measured, "noise_ns": noise,
                 "backpressured": (predicted > noise_ns) | slot, "control_mainloop_ns": ctrl_p99, "control_compute_ns": ctrl_median,
                 "control_epilogue_ns": tile_ep, "ns_per_cycle": period, **_forward_inputs(t), "compute_stall_ns": compute, "stall_ns": np.where(unmeasured, np.nan, total_stall_ns(measured, compute)),
                 "forward_stall_ns": np.where(np.isnan(link), recurrence, link),
                 "diagnosis": text_of_codes(np.select([slot, inflated], [0, 1], 2), ["slot_backpressure", "mainloop_inflation", "none"])})
    return pd.DataFrame(cols, copy=False)


LINK_READS = ["rank", "dump", "dest", "cta", "position", "mainloop_ns", "control_compute_ns", "control_epilogue_ns", "rs_bytes",
              "load_steps", "load_stages", "cover_tiles", "plain_store"]  # what analysis.stall.forward_link_launches reads of finished tiles


def with_link_forward(frames: list[pd.DataFrame], dumps: pd.DataFrame, link_models: Mapping[str, object]) -> list[pd.DataFrame]:
    """docs/model.md §11: tiles that ``finish_tiles`` finished without their path-drain link models (``frames``, the
    batches of one run), each frame's ``forward_stall_ns`` replaced where a model of ``link_models`` (dest →
    ``analysis.forward.LinkModel``) applies by §11's prediction (``analysis.stall.forward_link_stall_ns``), every
    launch of every frame predicted in one call. Launches predicted together get the numbers each gets alone, so the
    frames equal those ``finish_tiles`` gives one batch at a time with the link models."""
    from xstage_trace.analysis.stall import forward_link_stall_ns

    full = [f for f in frames if len(f)]
    if not link_models or not full:
        return frames
    t = with_dump_columns(pd.concat([f[LINK_READS] for f in full], ignore_index=True), dumps.drop_duplicates(["rank", "dump"]), ["operands"])
    link = forward_link_stall_ns(t, link_models)
    out, at = [], 0
    for f in frames:
        if len(f):
            part, at = link[at:at + len(f)], at + len(f)
            f = f.assign(forward_stall_ns=np.where(np.isnan(part), f["forward_stall_ns"].to_numpy(np.float64), part))
        out.append(f)
    return out


def _forward_inputs(t: pd.DataFrame) -> dict[str, np.ndarray]:
    """What the forward prediction reads of a tile beyond its spans (docs/model.md §11, §12): the bytes it stores
    through the path, its operand-load steps and pipeline stages, and how many compute spans cover its store (the
    lifecycle's slots) and whether its stores are plain stores (``TileLifecycle.plain_stores``); kept in the tiles table so a notebook or a what-if re-runs the prediction from the run."""
    n = len(t)
    return {"rs_bytes": t["rs_bytes"].to_numpy(np.float64) if "rs_bytes" in t else np.full(n, np.nan),
            "load_steps": t["load_steps"].to_numpy(np.int32) if "load_steps" in t else np.ones(n, np.int32),
            "load_stages": t["load_stages"].to_numpy(np.int32) if "load_stages" in t else np.ones(n, np.int32),
            "cover_tiles": t["cover_tiles"].to_numpy(np.int32) if "cover_tiles" in t else np.ones(n, np.int32),
            "plain_store": t["plain_store"].to_numpy(bool) if "plain_store" in t else np.zeros(n, bool)}


def _combined_keys(codes: list[tuple[np.ndarray, list]]) -> tuple[np.ndarray, Callable[[int], tuple]]:
    """One group code per row from per-column text codes (``text_codes``; −1, a missing key, included) and the
    function that turns a group code back into its key tuple (None for a missing key)."""
    combo = np.zeros(len(codes[0][0]) if codes else 0, np.int64)
    for c, names in codes:
        combo = combo * (len(names) + 1) + c + 1

    def key_of(g: int) -> tuple:
        key, rest = [], int(g)
        for _, names in reversed(codes):
            rest, v = divmod(rest, len(names) + 1)
            key.append(names[v - 1] if v else None)
        return tuple(reversed(key))

    return combo, key_of


def _control_lookup(groups: tuple[np.ndarray, Callable[[int], tuple]], p99: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per tile the control statistics of its CONTROL_KEYS (``groups``: ``_combined_keys`` of the tiles' CONTROL_KEYS; every
    other column of ``p99``: mainloop p99 and median, store-span median and p99), a left join where a missing key matches
    a missing key as in pandas' merge: the few distinct key tuples looked up in a dict."""
    combo, key_of = groups
    pair, firsts = pd.factorize(combo)
    row_of: dict[tuple, int] = {}
    for i, key in enumerate(zip(*(p99[k] for k in CONTROL_KEYS))):
        row_of.setdefault(tuple(None if pd.isna(x) else str(x) for x in key), i)
    found = np.array([row_of.get(key_of(f), -1) for f in firsts], np.intp)
    pos = found[pair]
    return {c: np.where(pos >= 0, p99[c].to_numpy(np.float64)[np.maximum(pos, 0)], np.nan) if len(p99) else np.full(len(combo), np.nan)
            for c in p99.columns if c not in CONTROL_KEYS}


CONTROL_KEYS = ["shape", "tile_kind", "operands"]


def _tile_control_lookup(groups: tuple[np.ndarray, Callable[[int], tuple]], t: pd.DataFrame,
                         per_tile: Mapping[tuple, TileControl]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tile of ``t`` (``groups``: ``_combined_keys`` of its CONTROL_KEYS) its per-tile control (``TileControl`` of
    its CONTROL_KEYS, the entry of its tile id): median mainloop (cycles), median epilogue span (ns) and the group's
    jitter (cycles); NaN where the control has no tile of that id. Without a per-tile control the tile ids are not read."""
    combo, key_of = groups
    n = len(t)
    ml, ep, jitter = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    if not per_tile or not n:
        return ml, ep, jitter
    tile = t["tile"].to_numpy(np.int64)
    for g in np.unique(combo):  # a few: shapes × kinds × operand paths
        tc = per_tile.get(key_of(g))
        if tc is None:
            continue
        rows = np.flatnonzero(combo == g)
        at = np.minimum(np.searchsorted(tc.tile, tile[rows]), len(tc.tile) - 1)
        hit = tc.tile[at] == tile[rows]
        ml[rows[hit]], ep[rows[hit]], jitter[rows[hit]] = tc.mainloop_cycles[at[hit]], tc.epilogue_ns[at[hit]], tc.jitter_cycles
    return ml, ep, jitter


@dataclass(frozen=True)
class ControlStats:
    """What the control runs decide for every tile: slot-wait floor and noise (and how many control waits
    decided them: 0 leaves the floor unknown), per CONTROL_KEYS the mainloop p99 (column ``ctrl``) and median
    (``ctrl_median``) and the remote-store span's median and p99 (``ctrl_store_median``, ``ctrl_store_p99``), and
    per CONTROL_KEYS the per-tile control (``per_tile``: ``TileControl``, docs/model.md Eq. 46)."""

    floor_ns: float
    noise_ns: float
    mainloop_p99: pd.DataFrame
    waits: int = 0
    per_tile: Mapping[tuple, "TileControl"] = field(default_factory=dict)


@dataclass(frozen=True)
class TileControl:
    """docs/model.md §12, the per-tile control of one (shape, tile kind, operand path): per tile id (sorted,
    ``tile``) the median mainloop (SM clock cycles, Eq. 46a) and epilogue span (ns; NaN where none was recorded) of
    the control's tiles with that id, over its launches, and ``jitter_cycles``: the p99 of the control tiles'
    mainloop beyond their own tile's median (the control's run-to-run spread of one tile; 0 with one launch)."""

    tile: np.ndarray
    mainloop_cycles: np.ndarray
    epilogue_ns: np.ndarray
    jitter_cycles: float


def _key_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique integer keys, each key's index among them): ``np.unique(keys, return_inverse=True)``, from a
    table of the keys present where their range is at most a few times their number (no sort)."""
    keys = np.asarray(keys, np.int64)
    if not len(keys):
        return keys, np.zeros(0, np.intp)
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo > 4 * len(keys) + (1 << 16):
        return np.unique(keys, return_inverse=True)
    present = np.zeros(hi - lo + 1, bool)
    present[keys - lo] = True
    return np.flatnonzero(present) + lo, (np.cumsum(present) - 1)[keys - lo]


def _medians_by(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique keys, the median of the non-NaN values of each key: NaN where it has none), numpy's median
    (``columnar.group_median`` over the keys' codes)."""
    uniq, code = _key_codes(keys)
    return uniq, group_median(values, code, len(uniq))


ID_BINS = 1 << 16  # bins of a group's tile-id range counted to cut it into ranges of at most a cap of values


def _id_ranges(counts: np.ndarray, lo: int, shift: int, cap: int) -> list[tuple[int, int]]:
    """[first, last] tile ids of consecutive ranges of ``counts`` (values per id bin of width 2^shift from ``lo``), each
    of at most ``cap`` values (a bin over the cap alone is a range of its own)."""
    ranges, start, held = [], 0, 0
    for i, c in enumerate(counts.tolist()):
        if held and held + c > cap:
            ranges.append((start, i - 1))
            start, held = i, 0
        held += c
    ranges.append((start, len(counts) - 1))
    return [(lo + (a << shift), lo + ((b + 1) << shift) - 1) for a, b in ranges]


def tile_controls(samples: Callable[[], Iterable[ControlSample]], cap: int = sys.maxsize) -> dict[tuple, TileControl]:
    """docs/model.md §12: the per-tile control of each group from the control samples' per-tile values
    (``ControlSample.tiles``; ``samples()`` yields them anew on every call): the tiles with one id over every control
    launch decide its medians. At most ``cap`` values of a group are held at once: past it the group's tile ids are
    taken in ranges of at most ``cap`` values (one pass over the samples each; an id's medians read its own values
    only; one id bin over the cap is held whole) and the p99 of the excess comes from its order statistics
    (``selection.order_statistics``): the same numbers as from every value at once."""
    seen: dict[tuple, tuple[int, int, int]] = {}  # per group, in first-seen order: its values, smallest and largest id
    for smp in samples():
        for key, (tile, _, _) in smp.tiles.items():
            n, lo, hi = seen.setdefault(key, (0, sys.maxsize, -sys.maxsize))
            if len(tile):
                seen[key] = (n + len(tile), min(lo, int(tile.min())), max(hi, int(tile.max())))
    out = {}
    for key, (n, lo, hi) in seen.items():  # a few groups
        if not n:
            continue
        ranges = [(lo, hi)] if n <= cap else _id_ranges(_id_counts(samples, key, lo, hi), lo, _id_shift(lo, hi), cap)
        parts = [_medians_of_ids(samples, key, first, last, whole=len(ranges) == 1) for first, last in ranges]
        ids, ml, ep = (np.concatenate([p[i] for p in parts]) for i in range(3))
        if len(ranges) == 1:
            tile, mainloop = parts[0][3]
            p99 = float(np.percentile(mainloop - ml[np.searchsorted(ids, tile)], 99))
        else:
            def excess(key=key, ids=ids, ml=ml) -> Iterator[dict]:
                for smp in samples():
                    t, m, _ = smp.tiles.get(key, (np.zeros(0, np.int64), np.zeros(0), None))
                    yield {"excess": m - ml[np.searchsorted(ids, t)]}

            count, _, found = order_statistics(excess, lambda _, k: quantile_ranks(k, 0.99), cap)
            p99 = numpy_percentile_of(found["excess"], count["excess"], 0.99)
        out[key] = TileControl(ids, ml, ep, max(p99, 0.0))
    return out


def _id_shift(lo: int, hi: int) -> int:
    """log2 of the width of the ID_BINS bins that cover tile ids lo … hi."""
    return max(0, (hi - lo).bit_length() - ID_BINS.bit_length() + 1)


def _id_counts(samples: Callable[[], Iterable[ControlSample]], key: tuple, lo: int, hi: int) -> np.ndarray:
    """Values of group ``key`` per tile-id bin (``_id_shift``) over every sample: one pass."""
    shift = _id_shift(lo, hi)
    counts = np.zeros(((hi - lo) >> shift) + 1, np.int64)
    for smp in samples():
        tile = smp.tiles.get(key, (np.zeros(0, np.int64),))[0]
        counts += np.bincount((tile - lo) >> shift, minlength=len(counts))
    return counts


def _medians_of_ids(samples: Callable[[], Iterable[ControlSample]], key: tuple, first: int, last: int, whole: bool) -> tuple:
    """(ids, median mainloop, median epilogue, (tile, mainloop) of the values read) of group ``key``'s tile ids
    ``first`` … ``last`` over every sample: one pass. ``whole``: the range is the group's (no selection)."""
    held = []
    for smp in samples():
        if key in smp.tiles:
            t, m, e = smp.tiles[key]
            held.append((t, m, e) if whole else tuple(a[(t >= first) & (t <= last)] for a in (t, m, e)))
    tile, mainloop, epilogue = (np.concatenate([h[i] for h in held]) for i in range(3))
    del held
    ids, ml = _medians_by(tile, mainloop)
    _, ep = _medians_by(tile, epilogue)
    return ids, ml, ep, ((tile, mainloop) if whole else None)


def with_dump_columns(t: pd.DataFrame, dumps: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``t`` with ``cols`` and ``is_control`` of each row's dump: a left join on (rank, dump), each row's dump row
    looked up among the few distinct (rank, dump) pairs and its columns taken by index (pandas' merge when the dumps
    repeat a (rank, dump): every match)."""
    cfg = dumps[["rank", "dump", *cols, "is_control"]]
    row_of = {(int(r), str(d)): i for i, (r, d) in enumerate(zip(cfg["rank"].to_numpy(), cfg["dump"].astype(str)))}
    if len(row_of) < len(cfg):
        t = t.merge(cfg.assign(dump=cfg["dump"].astype(str)), on=["rank", "dump"], how="left")
        t["is_control"] = t["is_control"].fillna(False).astype(bool)
        return t
    dump, names = pd.factorize(t["dump"], use_na_sentinel=False)
    rank = t["rank"].to_numpy().astype(np.int64)
    lo, width = int(rank.min(initial=0)), int(rank.max(initial=0)) - int(rank.min(initial=0)) + 1
    pair, firsts = pd.factorize(dump.astype(np.int64) * width + (rank - lo))
    found = np.array([row_of.get((int(f % width) + lo, str(names[f // width])), -1) for f in firsts], np.intp)
    pos = found[pair]
    t = t.copy(deep=False)
    for c in cols:
        t[c] = cfg[c].array.take(pos, allow_fill=True)
    t["is_control"] = (pos >= 0) & cfg["is_control"].to_numpy(bool)[np.maximum(pos, 0)] if len(cfg) else np.zeros(len(t), bool)
    return t


def with_dump_config(t: pd.DataFrame, dumps: pd.DataFrame) -> pd.DataFrame:
    """Tile spans with their dump's configuration, ``is_control`` and ``tile_kind``: a left join on (rank, dump),
    each tile's dump row looked up among the few distinct (rank, dump) pairs and its columns taken by index
    (pandas' merge when the dumps repeat a (rank, dump): every match)."""
    t = with_dump_columns(t, dumps, ["dest", "shape", "schedule", "variant", "operands"])
    kind = text_of_codes(t["is_l2"].to_numpy(bool), ["linear1", "linear2"])  # the fused kernels; a layout with one kind of tile sets its own
    t["tile_kind"] = t["tile_kind"].fillna(pd.Series(kind, index=t.index)) if "tile_kind" in t else kind
    return t


@dataclass
class ControlSample:
    """What the control statistics are taken of, from some control tiles: their slot waits (NaN dropped)
    and, per (shape, tile kind, operand path) — None where a key is missing — their mainloops (in SM clock
    cycles, Eq. 46a) and their remote-store spans (ns; NaN dropped; a group whose values are all missing holds
    none). The statistics of the samples of disjoint sets of tiles are those of their union
    (``control_stats_from_samples``)."""

    waits_ns: np.ndarray
    mainloops_cycles: dict[tuple, np.ndarray]
    stores_ns: dict[tuple, np.ndarray]
    tiles: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)


def control_sample(tiles: pd.DataFrame | Mapping[str, pd.Series]) -> ControlSample:
    """The control tiles' values in ``tiles`` (with_dump_config's columns, a frame or a mapping of columns); per
    group also each tile's id, mainloop (cycles) and epilogue span (ns) (``ControlSample.tiles``, the per-tile control)."""
    ctrl = np.asarray(tiles["is_control"], bool)
    waits = tiles["slot_wait_ns"].to_numpy(np.float64)[ctrl]
    keys = [(codes[ctrl], names) for codes, names in (text_codes(tiles[k]) for k in CONTROL_KEYS)]  # -1: missing
    mainloop = _cycles(tiles, "mainloop_ns")[ctrl]  # the compute spans in cycles of the control's clock (Eq. 46a)
    store_col = next((c for c in ("rs_ns", "rs_span_ns") if c in tiles), None)
    store = (tiles[store_col].to_numpy(np.float64) if store_col else np.full(len(ctrl), np.nan))[ctrl]
    tile = np.asarray(tiles["tile"], np.int64)[ctrl] if "tile" in tiles else None  # without tile ids: no per-tile control
    epilogue = (np.asarray(tiles["epilogue_span_ns"], np.float64) if "epilogue_span_ns" in tiles else np.full(len(ctrl), np.nan))[ctrl]
    group, key_of = _combined_keys(keys)
    groups, stores, per_tile = {}, {}, {}
    for g in np.unique(group):  # a few: shapes × kinds × operand paths
        v, s, key = mainloop[group == g], store[group == g], key_of(g)
        groups[key] = v[~np.isnan(v)]
        stores[key] = s[~np.isnan(s)]
        kept = (group == g) & ~np.isnan(mainloop)
        if tile is not None:
            per_tile[key] = (tile[kept], mainloop[kept], epilogue[kept])
    return ControlSample(waits[~np.isnan(waits)], groups, stores, per_tile)


def _cycles(tiles: pd.DataFrame | Mapping[str, pd.Series], column: str) -> np.ndarray:
    """A span column in SM clock cycles: ns over the launch's clock period (``ns_per_cycle``; as ns where absent)."""
    ns = np.asarray(tiles[column], np.float64)
    return ns / np.asarray(tiles["ns_per_cycle"], np.float64) if "ns_per_cycle" in tiles else ns


def control_stats_from_samples(samples: Callable[[], Iterable[ControlSample]], cap: int) -> ControlStats:
    """docs/model.md §5's control statistics of the control tiles whose samples ``samples()`` yields (anew on every
    call), holding at most ``cap`` values of a sample at once (``selection.order_statistics``): the slot-wait
    floor and noise (``_wait_stats``) and the mainloop p99 per (shape, tile kind, operand path), pandas'
    linear-interpolation quantile (NaN for a group with no mainloop). The same numbers as for one sample of
    all the tiles, whatever the cap; the per-tile control (``tile_controls``) at most ``cap`` values of a group at once."""
    def chunks() -> Iterator[dict]:
        for s in samples():
            yield {"waits": s.waits_ns, **{("mainloop", k): v for k, v in s.mainloops_cycles.items()},
                   **{("store", k): v for k, v in s.stores_ns.items()}}

    def ranks_of(name, n: int) -> list[int]:
        return median_ranks(n) + quantile_ranks(n, 0.99)

    n, _, found = order_statistics(chunks, ranks_of, cap)
    floor_ns, noise_ns = _wait_stats(found.get("waits", {}), n.get("waits", 0))
    groups = [k for k in n if k != "waits" and k[0] == "mainloop"]
    order = sorted(groups, key=lambda k: tuple((x is not None, x or "") for x in k[1]))  # missing keys first
    rows = [[*k[1], linear_quantile_of(found[k], n[k], 0.99), median_of(found.get(k, {}), n[k]),
             median_of(found.get(("store", k[1]), {}), n.get(("store", k[1]), 0)),
             linear_quantile_of(found.get(("store", k[1]), {}), n.get(("store", k[1]), 0), 0.99)] for k in order]
    p99 = pd.DataFrame(rows, columns=[*CONTROL_KEYS, "ctrl", "ctrl_median", "ctrl_store_median", "ctrl_store_p99"]).astype(
        {"ctrl": float, "ctrl_median": float, "ctrl_store_median": float, "ctrl_store_p99": float, **{k: "str" for k in CONTROL_KEYS}})  # text, NaN where missing
    return ControlStats(floor_ns, noise_ns, p99, int(n.get("waits", 0)), tile_controls(samples, cap))


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


def compute_stall_ns(mainloop_ns: np.ndarray, control_compute_ns: np.ndarray, inflated: np.ndarray) -> np.ndarray:
    """docs/model.md §12: the compute part of a tile's measured stall, its mainloop beyond the control's
    median mainloop where the mainloop is inflated (``mainloop_inflated``), 0 where it is not, NaN where
    no control of the tile's shape, kind and operand path was traced."""
    return np.where(np.isnan(control_compute_ns), np.nan, np.where(inflated, mainloop_ns - control_compute_ns, 0.0))


def total_stall_ns(wait_stall_ns: np.ndarray, compute_stall_ns: np.ndarray) -> np.ndarray:
    """docs/model.md §12: a tile's measured stall, its slot wait beyond the floor plus its compute span
    beyond the control's; NaN only where neither part was measured."""
    neither = np.isnan(wait_stall_ns) & np.isnan(compute_stall_ns)
    return np.where(neither, np.nan, np.nan_to_num(wait_stall_ns) + np.nan_to_num(compute_stall_ns))


def _wait_stats(stats: Mapping[int, float], n: int) -> tuple[float, float]:
    """(floor, noise) of the control runs' ``n`` slot waits (``RunConfig.is_control``: local-store destination
    or ``control=1``; no NaN) from their order statistics. Floor = median raw wait (the cost of the
    instrumented wait itself); noise = p99 of the floor-corrected waits, at least MIN_NOISE_NS (numpy's
    median and percentile, bit for bit). Without a control: (0, MIN_NOISE_NS)."""
    if not n:
        return 0.0, MIN_NOISE_NS
    floor = median_of(stats, n)
    return floor, float(max(numpy_percentile_of(stats, n, 0.99, shift=floor), MIN_NOISE_NS))
