"""One verdict per configuration and schedule from Table 3 (spec §5): is the compute stalled by
the remote-store epilogue, and does the model's prediction agree with the measurement?

A configuration × schedule is *stall-bound* when its median predicted or measured MMA stall
Δt exceeds the noise floor (spec §5: "backpressured when its predicted or measured stall is
positive beyond noise"), else *covered*. The model agrees when prediction and measurement fall on
the same side of the noise floor.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from xstage_trace.analysis.tiles import MIN_NOISE_NS

KEY_COLUMNS = ("dest", "shape", "variant", "kernel")
_STALL = re.compile(r"^stall_(?P<schedule>.+)_(?P<which>pred|meas)_us$")


def table3_schedules(table3: pd.DataFrame) -> list[str]:
    """Schedules present in a Table-3 frame, from its ``stall_<schedule>_pred|meas_us`` columns
    (in column order: wave before interleaved for the reference kernel)."""
    seen: list[str] = []
    for c in table3.columns:
        m = _STALL.match(str(c))
        if m and m["schedule"] not in seen:
            seen.append(m["schedule"])
    return seen


def config_verdicts(table3: pd.DataFrame, noise_ns: float | None) -> pd.DataFrame:
    """Spec §5 verdict per (configuration, schedule) of Table 3: key columns, predicted and measured
    median stall (µs, probe clock per SM), backpressured tiles, kernel time (ms, nsys), ``verdict``
    (stall-bound | covered) and ``model_agrees``; a schedule with neither stall is left out.
    ``noise_ns`` None → MIN_NOISE_NS."""
    noise_us = (MIN_NOISE_NS if noise_ns is None else float(noise_ns)) / 1e3
    keys = [c for c in KEY_COLUMNS if c in table3.columns]
    parts = []
    for sched in table3_schedules(table3):
        pred = table3.get(f"stall_{sched}_pred_us", pd.Series(np.nan, index=table3.index)).astype(float)
        meas = table3.get(f"stall_{sched}_meas_us", pd.Series(np.nan, index=table3.index)).astype(float)
        part = table3[keys].copy()
        part["schedule"] = sched
        part["predicted_stall_us"] = pred.to_numpy()
        part["measured_stall_us"] = meas.to_numpy()
        part["backpressured_tiles"] = table3.get(f"backpressured_{sched}", pd.Series(np.nan, index=table3.index)).to_numpy()
        part["kernel_ms"] = table3.get(f"kernel_ms_{sched}", pd.Series(np.nan, index=table3.index)).astype(float).to_numpy()
        pred_over, meas_over = pred.to_numpy() > noise_us, meas.to_numpy() > noise_us
        part["verdict"] = np.where(pred_over | meas_over, "stall-bound", "covered")
        part["model_agrees"] = np.where(meas.isna().to_numpy(), None, pred_over == meas_over)
        part["noise_us"] = noise_us
        parts.append(part[pred.notna().to_numpy() | meas.notna().to_numpy()])  # a schedule this configuration did not run
    cols = keys + ["schedule", "predicted_stall_us", "measured_stall_us", "backpressured_tiles", "kernel_ms", "verdict", "model_agrees", "noise_us"]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]
