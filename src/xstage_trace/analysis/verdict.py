"""Verdict per configuration and schedule (docs/model.md §5, §12): is the compute stalled by the remote
stores, why, and does the model's prediction agree with the measurement?

The rule (one place, for the CLI, the dashboard, the reports and the gate: ``config_verdicts`` over
Table 3): over a configuration's tiles whose epilogue stores remotely,
- measured (the run has a control, so the measured stall exists): **stall-bound** when the median
  measured stall (slot wait beyond the control's floor plus compute span beyond the control's, §12)
  exceeds the noise floor, or when more than STALLED_SHARE of the tiles with a measured stall stall beyond it (a stall that
  hits a large minority of the tiles stretches the kernel even with a median of 0), **covered** otherwise;
- not measured (no control of the configuration's shape and no slot wait): **stall-bound** when the
  prediction (the calibrated forward prediction where there is one, else the §5 slot model's median
  per-tile Δt) exceeds the noise floor, **unknown** otherwise — a verdict never says "covered" for a stall
  it could not measure.
The diagnosis names the cause of a stall-bound configuration: ``slot_backpressure`` where the median
slot stall exceeds the noise (the store still holds the slot when the next tile needs it: the paper's
backpressure), else ``mainloop_inflation`` where the median compute part does (remote stores slow the
compute span itself: an ``st.global`` epilogue's stalled stores, operand loads queued behind pending host
writes, §11), else the cause of the larger share of stalled tiles; ``none`` for covered and unknown
configurations. The noise floor is the tiles' own (derived from the control run by ``analysis.tiles``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.tiles import MIN_NOISE_NS

KEY_COLUMNS = ("dest", "shape", "variant", "schedule")
STALLED_SHARE = 0.25
VERDICT_COLUMNS = [*KEY_COLUMNS, "verdict", "diagnosis", "basis", "tiles", "stalled_tiles", "measured_stall_ns", "measured_stall_p99_ns",
                   "slot_stall_ns", "compute_stall_ns", "slot_model_stall_ns", "predicted_stall_ns", "kernel_ns", "noise_ns", "model_agrees"]


def stall_verdict(measured_stall_ns, predicted_stall_ns, noise_ns):
    """docs/model.md §5 rule, vectorized: "stall" when the measured (median) stall exceeds the noise floor,
    or, where no stall was measured, when the predicted one does; "no stall" when the measured stall is at
    or below it; "unknown" when it was not measured and the prediction does not exceed it."""
    meas = np.asarray(measured_stall_ns, dtype=np.float64)
    pred = np.asarray(predicted_stall_ns, dtype=np.float64)
    noise = np.asarray(noise_ns, dtype=np.float64)
    measured = ~np.isnan(meas)
    stall = np.where(measured, np.nan_to_num(meas, nan=-np.inf) > noise, np.nan_to_num(pred, nan=-np.inf) > noise)
    return np.where(stall, "stall", np.where(measured, "no stall", "unknown"))


def config_verdicts(table3: pd.DataFrame) -> pd.DataFrame:
    """docs/model.md §5, §12: one verdict row per Table 3 row (dest, shape, variant, schedule):
    ``verdict`` (stall-bound | covered | unknown), ``diagnosis``, ``basis`` (measured | predicted | none),
    the tiles and stalled tiles, the median and p99 measured stall and its slot and compute parts, the slot
    model's median Δt, the calibrated forward prediction (``predicted_stall_ns``, NaN without a
    calibration), the kernel time and the noise floor (ns), and ``model_agrees`` (the prediction on the
    same side of the noise floor as the measurement; None where either is missing)."""
    if table3.empty:
        return pd.DataFrame(columns=VERDICT_COLUMNS)

    def col(name: str) -> np.ndarray:
        return table3[name].to_numpy(np.float64) if name in table3 else np.full(len(table3), np.nan)

    noise = np.nan_to_num(col("noise_ns"), nan=MIN_NOISE_NS)
    meas, slot, comp = col("stall_ns"), col("slot_meas_ns"), col("compute_stall_ns")
    forward, slot_model = col("forward_stall_ns"), col("slot_pred_ns")
    pred = np.where(np.isnan(forward), slot_model, forward)
    rule = stall_verdict(meas, pred, noise)
    measured_tiles = table3["measured_tiles"] if "measured_tiles" in table3 else table3["tiles"]
    share = table3["stalled_tiles"].to_numpy(np.float64) / np.maximum(measured_tiles.to_numpy(np.float64), 1)
    rule = np.where((rule == "no stall") & (share > STALLED_SHARE), "stall", rule)
    verdict = np.select([rule == "stall", rule == "no stall"], ["stall-bound", "covered"], "unknown")
    backpressured, inflated = col("backpressured_tiles"), col("inflated_tiles")
    cause = np.select([np.nan_to_num(slot) > noise, np.nan_to_num(comp) > noise, inflated > backpressured],
                      ["slot_backpressure", "mainloop_inflation", "mainloop_inflation"], "slot_backpressure")
    out = table3[list(KEY_COLUMNS)].copy()
    out["verdict"] = verdict
    out["diagnosis"] = np.where(verdict == "stall-bound", cause, "none")
    out["basis"] = np.where(~np.isnan(meas), "measured", np.where(~np.isnan(pred), "predicted", "none"))
    out["tiles"] = table3["tiles"].to_numpy()
    out["stalled_tiles"] = table3["stalled_tiles"].to_numpy()
    out["measured_stall_ns"], out["measured_stall_p99_ns"] = meas, col("stall_p99_ns")
    out["slot_stall_ns"], out["compute_stall_ns"] = slot, comp
    out["slot_model_stall_ns"], out["predicted_stall_ns"] = slot_model, forward
    out["kernel_ns"], out["noise_ns"] = col("kernel_ns"), noise
    agree = (np.nan_to_num(pred, nan=-np.inf) > noise) == (np.nan_to_num(meas, nan=-np.inf) > noise)
    out["model_agrees"] = np.where(np.isnan(meas) | np.isnan(pred), None, agree)
    return out[VERDICT_COLUMNS].reset_index(drop=True)
