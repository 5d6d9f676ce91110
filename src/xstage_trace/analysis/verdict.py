"""Verdict per configuration and schedule (docs/model.md §5): is the compute stalled by the remote-store
epilogue, and does the model's prediction agree with the measurement?

The rule (one place, for the dashboard and the reports, ``stall_verdict``): over the Linear-2 tiles
that can be backpressured (those with a remote-store span), a configuration × schedule **stalls**
when the median measured stall exceeds the noise floor, or when the median predicted stall
Δt = [T_RS − T_cover]₊ does (docs/model.md §5: "backpressured when its predicted or measured stall is
positive beyond noise"); "no stall" when both medians are at or below it; "unknown" when neither
exists. The noise floor is the tiles' own ``noise_ns`` (derived from the control run by
``analysis.tiles``). The model agrees when prediction and measurement fall on the same side of it.
``configuration_verdicts`` applies it to a tile table, ``config_verdicts`` to Table 3's medians.

Beyond the paper, the slot model cannot see every stall: remote stores can slow the mainloop itself
(an ``st.global`` epilogue's stalled stores block the SM's memory instructions) while the slot wait
stays at its floor. ``configuration_diagnosis`` therefore names the cause per configuration ×
schedule: ``slot_backpressure`` where the rule above says stall, otherwise ``mainloop_inflation``
where more than half of the Linear-2 tiles (the median tile) have a mainloop inflated against the
local control's of the same shape (``analysis.tiles.mainloop_inflated``), otherwise ``none``. Either
cause makes the configuration stall-bound.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from xstage_trace.analysis.tiles import MIN_NOISE_NS, mainloop_inflated

KEY_COLUMNS = ("dest", "shape", "variant", "kernel")
_STALL = re.compile(r"^stall_(?P<schedule>.+?)_(?P<which>pred_tiles|meas)_us$")


def table3_schedules(table3: pd.DataFrame) -> list[str]:
    """Schedules present in a Table-3 frame, from its ``stall_<schedule>_pred_tiles|meas_us`` columns
    (in column order: wave before interleaved for the reference kernel)."""
    seen: list[str] = []
    for c in table3.columns:
        m = _STALL.match(str(c))
        if m and m["schedule"] not in seen:
            seen.append(m["schedule"])
    return seen


def config_verdicts(table3: pd.DataFrame, noise_ns: float | None) -> pd.DataFrame:
    """Spec §5 verdict per (configuration, schedule) of Table 3: key columns, predicted and measured
    median stall (µs, probe clock per SM; predicted = the median of per-tile Δt), backpressured tiles,
    kernel time (ms, nsys), ``diagnosis`` (:func:`configuration_diagnosis`, from the median rule and the
    share ``inflated_share`` = Table 3's ``inflated_<schedule>`` / ``inflation_judged_<schedule>``: NaN
    where no tile could be judged; absent for a Table 3 written before the diagnosis), ``verdict``
    (stall-bound where the diagnosis names a cause, covered otherwise) and ``model_agrees`` (about the
    slot stall); a schedule with neither stall is left out.
    ``noise_ns`` None → MIN_NOISE_NS."""
    noise_us = (MIN_NOISE_NS if noise_ns is None else float(noise_ns)) / 1e3
    keys = [c for c in KEY_COLUMNS if c in table3.columns]
    parts = []
    for sched in table3_schedules(table3):
        pred = table3.get(f"stall_{sched}_pred_tiles_us", pd.Series(np.nan, index=table3.index)).astype(float)
        meas = table3.get(f"stall_{sched}_meas_us", pd.Series(np.nan, index=table3.index)).astype(float)
        part = table3[keys].copy()
        part["schedule"] = sched
        part["predicted_stall_us"] = pred.to_numpy()
        part["measured_stall_us"] = meas.to_numpy()
        part["backpressured_tiles"] = table3.get(f"backpressured_{sched}", pd.Series(np.nan, index=table3.index)).to_numpy()
        part["kernel_ms"] = table3.get(f"kernel_ms_{sched}", pd.Series(np.nan, index=table3.index)).astype(float).to_numpy()
        pred_over, meas_over = pred.to_numpy() > noise_us, meas.to_numpy() > noise_us
        judged = table3.get(f"inflation_judged_{sched}", pd.Series(0, index=table3.index)).astype(float)
        share = table3.get(f"inflated_{sched}", pd.Series(0, index=table3.index)).astype(float) / judged.where(judged > 0)
        part["inflated_share"] = share.to_numpy()
        part["diagnosis"] = configuration_diagnosis(stall_verdict(meas.to_numpy(), pred.to_numpy(), noise_us), share.to_numpy())
        part["verdict"] = np.where(part["diagnosis"] != "none", "stall-bound", "covered")
        part["model_agrees"] = np.where(meas.isna().to_numpy(), None, pred_over == meas_over)
        part["noise_us"] = noise_us
        parts.append(part[pred.notna().to_numpy() | meas.notna().to_numpy()])  # a schedule this configuration did not run
    has_judged = any(str(c).startswith("inflation_judged_") for c in table3.columns)  # none in a Table 3 before the diagnosis
    cols = keys + ["schedule", "predicted_stall_us", "measured_stall_us", "backpressured_tiles", "kernel_ms", "verdict", "diagnosis",
                   *(["inflated_share"] if has_judged else []), "model_agrees", "noise_us"]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]


CONFIG_KEYS = ("dest", "shape", "schedule")
INFLATED_MAJORITY = 0.5  # more than half of the Linear-2 tiles: the median tile is inflated


def configuration_diagnosis(slot_verdict, inflated_share):
    """Vectorized: "slot_backpressure" where ``slot_verdict`` (of :func:`stall_verdict`) is "stall",
    else "mainloop_inflation" where the share of Linear-2 tiles with an inflated mainloop exceeds
    INFLATED_MAJORITY, else "none" (a NaN share: no control of that shape, not judged)."""
    slot = np.asarray(slot_verdict) == "stall"
    inflated = np.nan_to_num(np.asarray(inflated_share, dtype=np.float64), nan=0.0) > INFLATED_MAJORITY
    return np.where(slot, "slot_backpressure", np.where(inflated, "mainloop_inflation", "none"))


def stall_verdict(measured_stall_ns, predicted_stall_ns, noise_ns):
    """The rule, vectorized: "stall" when the measured or the predicted (median) stall exceeds the
    noise floor, "no stall" when a median exists and none does, "unknown" when both are NaN."""
    meas = np.asarray(measured_stall_ns, dtype=np.float64)
    pred = np.asarray(predicted_stall_ns, dtype=np.float64)
    noise = np.asarray(noise_ns, dtype=np.float64)
    stall = (np.nan_to_num(meas, nan=-np.inf) > noise) | (np.nan_to_num(pred, nan=-np.inf) > noise)
    unknown = np.isnan(meas) & np.isnan(pred)
    return np.where(stall, "stall", np.where(unknown, "unknown", "no stall"))


def configuration_verdicts(tiles: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (dest, shape, schedule, variant): Linear-2 tiles with a remote
    store, their median predicted and measured stall, the noise floor, backpressured tiles, tiles with
    an inflated mainloop, the :func:`configuration_diagnosis` and the verdict (:func:`stall_verdict`,
    or "stall" where the diagnosis is mainloop inflation). Empty when there are no tiles."""
    cols = [*CONFIG_KEYS, "variant", "l2_tiles", "predicted_stall_med_ns", "measured_stall_med_ns",
            "noise_ns", "backpressured_tiles", "inflated_tiles", "diagnosis", "verdict"]
    if tiles.empty or "tile_kind" not in tiles:
        return pd.DataFrame(columns=cols)
    cfg = tiles[[*CONFIG_KEYS, "variant"]].astype("category")
    capable = (tiles["tile_kind"].astype(str) == "linear2") & tiles["rs_span_ns"].notna()
    inflated = pd.Series(mainloop_inflated(tiles), index=tiles.index, name="inflated") if "control_mainloop_ns" in tiles \
        else pd.Series(False, index=tiles.index, name="inflated")
    t = pd.concat([cfg, tiles[["predicted_stall_ns", "measured_stall_ns", "noise_ns", "backpressured"]], inflated], axis=1)[capable]
    keys = [*CONFIG_KEYS, "variant"]
    if t.empty:
        return pd.DataFrame(columns=cols)
    g = t.groupby(keys, dropna=False, sort=True)
    out = g.agg(l2_tiles=("predicted_stall_ns", "size"), predicted_stall_med_ns=("predicted_stall_ns", "median"),
                measured_stall_med_ns=("measured_stall_ns", "median"), noise_ns=("noise_ns", "max"),
                backpressured_tiles=("backpressured", "sum"), inflated_tiles=("inflated", "sum")).reset_index()
    out["backpressured_tiles"] = out["backpressured_tiles"].astype(int)
    out["inflated_tiles"] = out["inflated_tiles"].astype(int)
    slot = stall_verdict(out["measured_stall_med_ns"], out["predicted_stall_med_ns"], out["noise_ns"])
    out["diagnosis"] = configuration_diagnosis(slot, out["inflated_tiles"] / out["l2_tiles"])
    out["verdict"] = np.where(out["diagnosis"] == "mainloop_inflation", "stall", slot)
    return out[cols]
