"""Where the per-tile stall error comes from (docs/model.md §5; docs/tile-error.md).

docs/model.md §5 predicts tile i's MMA stall as Δt = [T_RS(i) − T_cover(i)]₊ and measures it on the MMA side:
the wait for tile i's slot before tile j = i + S reuses it. This module lays every tile's slot cycle
out on one time line and splits the error into terms that add up exactly.

With ml_b/ml_e the mainloop start/end, w_b the start of the instrumented slot wait, ep_b/ep_e the
epilogue span of tile i (ep_e = ep_b + T_RS) and T_cover(i) = Σ mainloop(i+1 … j−1):

- ``mma_idle_ns``   = ml_b(j) − ml_e(j−1): the whole time the MMA role runs no mainloop before tile j;
- ``pre_wait_ns``   = w_b(j) − ml_e(j−1) and ``post_wait_ns`` = ml_b(j) − w_b(j) − wait(j): the idle
  time outside the instrumented wait (probes, descriptor loads); ``late_wait``: the pre-wait exceeds
  the control runs' median by more than the noise (the wait probe began late);
- ``epilogue_lead_ns`` = ep_b(i) − ml_b(i+1): how much later tile i's store starts than the mainloop
  that covers it (docs/model.md §5 takes 0; the per-tile prediction of ``analysis.tiles`` adds it);
- ``inner_idle_ns`` = ml_e(j−1) − ml_b(i+1) − T_cover(i): idle between the covering mainloops (0 for S = 2);
- ``wake_ns`` = ml_b(j) − ep_e(i): from the slot's release to the reusing mainloop's start.

Identity (exact, from the definitions): mma_idle = (T_RS − T_cover) + lead − inner + wake; the
``handoff_ns`` = mma_idle − (T_RS − T_cover) collects the last three. Against the MMA idle time less
its floor (the control runs' median idle, ``idle_stall_ns``), the model's error is the handoff beyond
that floor; against the instrumented wait (``measured_stall_ns`` of ``analysis.tiles``) it is that
plus ``missed_idle_ns`` = idle_stall − measured_stall, the idle time the wait probes do not see.

Grouping keys the breakdown offers: ``tile_kind``, ``wave``, ``position``, ``position_in_wave`` (index
in the CTA's run of tiles of one wave), ``slot_index`` (position mod S), ``burst_in_wave`` (index of a
Linear-2 tile among its CTA's Linear-2 tiles of that wave: the k-th tiles of all CTAs form the wave's
k-th burst). ``concurrent_rs`` counts the remote-store spans of the dump in flight when tile i's
starts (itself included) and ``drain_gbps`` = concurrent_rs · rs_bytes / T_RS is the aggregate drain
rate that tile saw (compare with the calibration's R).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from xstage_trace.analysis.columnar import cumcount, run_ids, shift_back, sort_codes
from xstage_trace.analysis.tiles import STAGING_SLOTS
from xstage_trace.analysis.verdict import stall_verdict

KEYS = ["rank", "dump", "cta", "position"]
CONFIG = ["dest", "shape", "schedule", "variant"]
TAIL_FRACTION = 0.05  # "the worst 5 % of tiles"


def tile_timeline(spans: pd.DataFrame, tiles: pd.DataFrame, slots: int = STAGING_SLOTS) -> pd.DataFrame:
    """Per tile of ``tiles`` (``analysis.tiles.finish_tiles`` plus a boolean ``is_control`` column:
    the tile's dump is a control run, ``RunConfig.is_control``) the slot-cycle terms of the module
    docstring, from the per-CTA spans of ``analysis.tiles.tile_spans`` (same ``slots``); with
    ``error_ns`` = predicted − measured stall, ``idle_stall_ns``, ``idle_error_ns`` = predicted −
    idle_stall, ``missed_idle_ns`` and the grouping keys. Pure: no I/O."""
    if spans.empty or tiles.empty:
        return pd.DataFrame()
    s = spans.sort_values(["rank", "dump", "cta", "position"], kind="stable").reset_index(drop=True)
    ids = run_ids(*(sort_codes(s[c]) for c in ("rank", "dump", "cta")))
    ml_b, ml_e = s["mainloop_start_ns"].to_numpy(float), s["mainloop_end_ns"].to_numpy(float)
    ep_b, span = s["epilogue_start_ns"].to_numpy(float), s["epilogue_span_ns"].to_numpy(float)
    w_b, wait = s["wait_start_ns"].to_numpy(float), s["wait_ns"].to_numpy(float)
    ml_b_j, w_b_j, wait_j = (shift_back(v, ids, slots) for v in (ml_b, w_b, wait))
    ml_e_prev, ml_b_next = shift_back(ml_e, ids, slots - 1), shift_back(ml_b, ids, 1)
    cover = s["cover_ns"].to_numpy(float)
    wave = s["wave"].to_numpy()
    wave_ids = run_ids(ids, wave)
    l2 = s["is_l2"].to_numpy(bool)
    burst = pd.Series(l2.astype(np.int64)).groupby(wave_ids).cumsum().to_numpy() - 1
    out = pd.DataFrame({
        **{k: s[k].to_numpy() for k in KEYS},
        "slot_index": s["position"].to_numpy() % slots,
        "position_in_wave": cumcount(wave_ids),
        "burst_in_wave": np.where(l2, burst, -1),
        "mma_idle_ns": ml_b_j - ml_e_prev,
        "pre_wait_ns": w_b_j - ml_e_prev,
        "post_wait_ns": ml_b_j - w_b_j - wait_j,
        "epilogue_lead_ns": ep_b - ml_b_next,
        "inner_idle_ns": (ml_e_prev - ml_b_next) - cover,
        "wake_ns": ml_b_j - (ep_b + span),
        "concurrent_rs": concurrent_spans(s["dump"].to_numpy(), s["rank"].to_numpy(), ep_b,
                                          np.where(np.isnan(s["rs_ns"].to_numpy(float)), np.nan, span)),
    })
    out["drain_gbps"] = out["concurrent_rs"] * s["rs_bytes"].to_numpy(float) / s["rs_ns"].to_numpy(float)
    t = tiles.drop(columns=["epilogue_lead_ns"], errors="ignore").merge(out, on=KEYS, how="left", validate="one_to_one")
    t["handoff_ns"] = t["mma_idle_ns"] - (t["epilogue_span_ns"] - t["cover_ns"])
    ctrl = t[t["is_control"].astype(bool)]
    floor, pre_floor = (float(ctrl[c].median()) if ctrl[c].notna().any() else 0.0 for c in ("mma_idle_ns", "pre_wait_ns"))
    t["idle_floor_ns"] = floor
    t["late_wait"] = (t["pre_wait_ns"] - pre_floor) > t["noise_ns"]
    t["idle_stall_ns"] = np.maximum(t["mma_idle_ns"] - floor, 0.0)
    t["error_ns"] = t["predicted_stall_ns"] - t["measured_stall_ns"]
    t["idle_error_ns"] = t["predicted_stall_ns"] - t["idle_stall_ns"]
    t["missed_idle_ns"] = t["idle_stall_ns"] - t["measured_stall_ns"]
    return t


def concurrent_spans(dump: np.ndarray, rank: np.ndarray, start_ns: np.ndarray, span_ns: np.ndarray) -> np.ndarray:
    """Per span (NaN span: not counted, result NaN) the number of spans of the same (rank, dump) in
    flight at its start, itself included: starts ≤ s minus ends ≤ s (an end at s has left)."""
    out = np.full(len(start_ns), np.nan)
    valid = ~np.isnan(span_ns) & ~np.isnan(start_ns)
    key = pd.factorize(pd.Series(rank).astype(str) + "\x00" + pd.Series(dump).astype(str))[0]
    for k in np.unique(key[valid]):  # one sorted search per dump (a handful), never per span
        rows = np.flatnonzero(valid & (key == k))
        st = start_ns[rows]
        starts, ends = np.sort(st), np.sort(st + span_ns[rows])
        out[rows] = np.searchsorted(starts, st, side="right") - np.searchsorted(ends, st, side="right")
    return out


def tail_share(abs_error: pd.Series, fraction: float = TAIL_FRACTION) -> float:
    """Share of the total |error| carried by the worst ``fraction`` of tiles (NaN when there is none)."""
    e = np.sort(np.abs(abs_error.dropna().to_numpy()))[::-1]
    if len(e) == 0 or e.sum() == 0:
        return np.nan
    return float(e[: max(1, int(round(fraction * len(e))))].sum() / e.sum())


def error_breakdown(timeline: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The per-tile error grouped by ``by`` (µs, probe clock per SM): tiles, mean |error| and mean
    error (predicted − measured slot wait), the group's share of the total |error|, mean predicted
    stall, mean missed idle, mean |error| and mean error against the MMA idle time, the medians of
    handoff, epilogue lead and wake over its tiles whose predicted stall exceeds the noise, and the
    median aggregate drain rate of its remote stores (GB/s)."""
    t = timeline.dropna(subset=["error_ns"])
    total = t["error_ns"].abs().sum()
    us = t.assign(abs_err=t["error_ns"].abs() / 1e3, err=t["error_ns"] / 1e3, pred=t["predicted_stall_ns"] / 1e3,
                  missed=t["missed_idle_ns"] / 1e3, abs_idle_err=t["idle_error_ns"].abs() / 1e3, idle_err=t["idle_error_ns"] / 1e3,
                  **{k: (t[c] / 1e3).where(t["predicted_stall_ns"] > t["noise_ns"])  # the identity's terms where the slot stalls
                     for k, c in (("handoff", "handoff_ns"), ("lead", "epilogue_lead_ns"), ("wake", "wake_ns"))})
    g = us.groupby(by, dropna=False, sort=True, observed=True)
    out = g.agg(tiles=("err", "size"), mae_us=("abs_err", "mean"), bias_us=("err", "mean"), abs_error_sum_us=("abs_err", "sum"),
                predicted_mean_us=("pred", "mean"), missed_idle_mean_us=("missed", "mean"), idle_mae_us=("abs_idle_err", "mean"),
                idle_bias_us=("idle_err", "mean"), handoff_median_us=("handoff", "median"), lead_median_us=("lead", "median"),
                wake_median_us=("wake", "median"), drain_median_gbps=("drain_gbps", "median")).reset_index()
    out.insert(out.columns.get_loc("abs_error_sum_us"), "error_share", out["abs_error_sum_us"] * 1e3 / total if total else np.nan)
    return out.drop(columns=["abs_error_sum_us"])


def backpressured_configurations(timeline: pd.DataFrame) -> pd.DataFrame:
    """The tiles of the configurations (dest, shape, schedule, variant) that docs/model.md §5's rule calls
    stall-bound: median predicted or measured stall of their Linear-2 tiles with a remote store above
    the noise floor (``analysis.verdict.stall_verdict``)."""
    t = timeline.assign(variant=timeline["variant"].fillna("-"))
    l2 = t[(t["tile_kind"] == "linear2") & t["rs_span_ns"].notna()]
    med = l2.groupby(CONFIG, sort=True).agg(pred=("predicted_stall_ns", "median"), meas=("measured_stall_ns", "median"),
                                             noise=("noise_ns", "max")).reset_index()
    stalled = med[stall_verdict(med["meas"], med["pred"], med["noise"]) == "stall"][CONFIG]
    return t.merge(stalled, on=CONFIG, how="inner")


def error_summary(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per stall-bound configuration and pooled over them (``configuration`` = "all"): tiles, mean and
    median |predicted − measured| against the instrumented wait and against the MMA idle time (µs),
    the Spearman rank correlation of each, the share of |error| in the worst 5 % of tiles, and the
    tiles whose wait began late (``late_wait``: the MMA idled longer than the control's median and the
    noise between its mainloop's end and the wait probe) with their share of the |error| against the wait."""
    t = backpressured_configurations(timeline)
    rows = []
    groups = [(" ".join(map(str, k)), g) for k, g in t.groupby(CONFIG, sort=True)] + ([("all", t)] if len(t) else [])
    for name, g in groups:
        row = {"configuration": name}
        for label, meas, err in (("wait", "measured_stall_ns", "error_ns"), ("idle", "idle_stall_ns", "idle_error_ns")):
            both = g.dropna(subset=["predicted_stall_ns", meas])
            e = both[err].abs() / 1e3
            row.update({f"tiles_{label}": len(both), f"mae_{label}_us": e.mean(), f"median_abs_{label}_us": e.median(),
                        f"spearman_{label}": spearmanr(both["predicted_stall_ns"], both[meas]).statistic if len(both) > 2 else np.nan,
                        f"tail5_share_{label}": tail_share(e)})
        e = g["error_ns"].abs()
        late = g["late_wait"].astype(bool)
        row.update({"late_wait_tiles": int(late.sum()), "late_wait_tile_share": float(late.mean()),
                    "late_wait_error_share": float(e[late].sum() / e.sum()) if e.sum() else np.nan})
        rows.append(row)
    return pd.DataFrame(rows)
