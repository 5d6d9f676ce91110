"""Per-tile stall prediction vs measurement (spec §5) from the probe records of a fused kernel.

Event conventions (instrument/examples/fused_moe.cu and the upstream recipes use them):
- role "mma" (slice role 0): ``slot_wait`` begin/end before a tile's mainloop (tile = the tile about
  to run), ``mainloop`` begin/end, ``tile_info`` mark (payload = kind | expert << 1 | wave << 16,
  kind 1 = Linear-2 with a remote-store epilogue, 0 = Linear-1).
- role "epi" (slice role 1): ``rs`` begin/end around a tile's remote stores (sender-visible span,
  end payload = bytes), ``ls`` begin/end around a local-store epilogue.

With S staging slots, tile i's slot is reused by the tile S positions later on the same CTA; the
mainloops in between cover the epilogue of tile i. With S = 2 that is the successor's mainloop:
T_cover(i) = mainloop(i+1), predicted Δt(i) = [T_RS(i) − T_cover(i)]₊, measured Δt(i) = the slot
wait before tile i+2, less the wait's own instrumented cost (the control run's median wait).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.spans import pair_spans
from xstage_trace.analysis.stall import predicted_stall_ns

STAGING_SLOTS = 2
MIN_NOISE_NS = 200.0


def _spans(p: pd.DataFrame, event: str, value: str) -> pd.DataFrame:
    s = pair_spans(p, [event], ["rank", "dump", "cta", "tile"]).drop(columns=["payload"])
    return s.rename(columns={"start": f"{value}_start_ns", "end": f"{value}_end_ns", "duration": f"{value}_ns"})


def tile_table(probes: pd.DataFrame, slices: pd.DataFrame, noise_ns: float | None = None, slots: int = STAGING_SLOTS) -> pd.DataFrame:
    """One row per tile of every fused-kernel dump: kind, expert, wave, mainloop, T_RS, T_cover,
    predicted and measured stall, backpressured flag (threshold: ``noise_ns`` or derived)."""
    if probes.empty or "mainloop" not in set(probes["event"].astype(str).unique()):
        return pd.DataFrame()
    p = probes.assign(event=probes["event"].astype(str), kind=probes["kind"].astype(str), dump=probes["dump"].astype(str))
    p = p[p["event"].isin(["mainloop", "slot_wait", "rs", "ls", "tile_info"])]
    keys = ["rank", "dump", "cta", "tile"]
    ml = _spans(p, "mainloop", "mainloop")
    info = p[p["event"] == "tile_info"][keys + ["payload"]]
    ml = ml.merge(info, on=keys, how="left")
    payload = ml["payload"].fillna(0).to_numpy().astype(np.int64)
    ml["is_l2"] = (payload & 1).astype(bool)
    ml["expert"] = (payload >> 1) & 0x7FFF
    ml["wave"] = payload >> 16
    ml = ml.drop(columns=["payload"])
    wait = _spans(p, "slot_wait", "wait")[keys + ["wait_ns"]]
    rs = _spans(p, "rs", "rs")[keys + ["rs_ns"]]
    ls = _spans(p, "ls", "ls")[keys + ["ls_ns"]]
    t = ml.merge(wait, on=keys, how="left").merge(rs, on=keys, how="left").merge(ls, on=keys, how="left")
    t = t.sort_values(["rank", "dump", "cta", "mainloop_start_ns"], kind="stable").reset_index(drop=True)
    g = t.groupby(["rank", "dump", "cta"], sort=False)
    t["position"] = g.cumcount()
    t["cover_ns"] = sum(g["mainloop_ns"].shift(-j) for j in range(1, slots)) if slots > 1 else 0.0
    t["slot_wait_ns"] = g["wait_ns"].shift(-slots)
    t["epilogue_span_ns"] = t["rs_ns"].fillna(t["ls_ns"])
    t["predicted_stall_ns"] = predicted_stall_ns(t["epilogue_span_ns"], t["cover_ns"])
    labels = slices.drop_duplicates("dump").set_index("dump")["label"]
    t["label"] = t["dump"].map(labels)
    floor_ns, derived_noise_ns = control_wait_stats(t)
    noise_ns = derived_noise_ns if noise_ns is None else noise_ns
    # The wait as instrumented costs a fixed time even when the slot is free (begin probe, one
    # flag read, end probe): the control's median. The stall is what exceeds it.
    t["wait_floor_ns"] = floor_ns
    t["measured_stall_ns"] = np.maximum(t["slot_wait_ns"] - floor_ns, 0.0)
    t["noise_ns"] = noise_ns
    t["backpressured"] = (t["predicted_stall_ns"] > noise_ns) | (t["measured_stall_ns"].fillna(0) > noise_ns)
    t["tile_kind"] = np.where(t["is_l2"], "linear2", "linear1")
    t = t.rename(columns={"rs_ns": "rs_span_ns"})
    return t[["rank", "dump", "label", "cta", "position", "tile", "tile_kind", "expert", "wave", "mainloop_ns", "rs_span_ns",
              "epilogue_span_ns", "cover_ns", "predicted_stall_ns", "slot_wait_ns", "wait_floor_ns", "measured_stall_ns",
              "noise_ns", "backpressured"]]


def control_wait_stats(tiles: pd.DataFrame) -> tuple[float, float]:
    """(floor, noise) of the slot wait from the control run: the local-store control (label
    ``dest=local``), else runs labelled ``control=1``. Floor = median raw wait (the cost of the
    instrumented wait itself); noise = p99 of the floor-corrected waits, at least MIN_NOISE_NS.
    Without a control: (0, MIN_NOISE_NS)."""
    lab = tiles["label"].fillna("")
    ctrl = tiles[lab.str.contains(r"\bdest=local\b")]
    if ctrl.empty:
        ctrl = tiles[lab.str.contains(r"\bcontrol=1\b")]
    waits = ctrl["slot_wait_ns"].dropna()
    if waits.empty:
        return 0.0, MIN_NOISE_NS
    floor = float(np.median(waits))
    return floor, float(max(np.percentile(waits - floor, 99), MIN_NOISE_NS))
