"""Probe records of the calibration benchmark → one measurement point per launch (docs/model.md §3 inputs).

The columns match ``h200_burst_gap_sweep.csv`` (dest, mode, K, B, V, gap_ns, tiss_med_ns,
tiss_p90_ns, period_med_ns, ns_per_cycle) plus the store instruction, the measured gap, the bursts
used and the count.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.columnar import as_text
from xstage_trace.analysis.spans import pair_spans
from xstage_trace.base.config import DEFAULT_STORE

BURST_EVENT = "burst"
CALIBRATION_MODES = ("periodic", "isolated")  # the calibration bench launch modes this reduces
PERIODIC_WARMUP_BURSTS = 16  # steady-state statistics skip the first bursts of a periodic launch
ISOLATED_WARMUP_BURSTS = 1


def burst_spans(probes: pd.DataFrame, event: str = BURST_EVENT) -> pd.DataFrame:
    """One row per (dump, cta, burst): begin/end ns, issue time, period and gap to the next burst."""
    p = probes[(probes["event"] == event).to_numpy()]  # categorical or text alike, without converting each row
    # Epoch ns do not fit float64 exactly: work in float ns relative to the earliest record.
    t = (p["t_gt_ns"] - p["t_gt_ns"].min()).astype(np.float64) if len(p) else p["t_gt_ns"].astype(np.float64)
    keys = ["dump", "cta", "tile"]
    s = pair_spans(p.assign(t=t), [event], keys, time_col="t").rename(columns={"start": "begin", "duration": "issue_ns"})
    s = s.sort_values(keys, kind="stable")
    s["dump"] = as_text(s["dump"])
    nxt = s.groupby(["dump", "cta"], sort=False)["begin"].shift(-1)
    s["period_ns"] = nxt - s["begin"]
    s["gap_meas_ns"] = nxt - s["end"]
    return s.rename(columns={"tile": "burst"})


def completion_rates(spans: pd.DataFrame) -> pd.Series:
    """Per dump, the pooled completion rate of its bursts (drain_points.completion_rate_gbps over every CTA's
    burst ends and bytes, docs/model.md §11): the path's drain rate where the launch was drain-limited."""
    from xstage_trace.analysis.drain_points import completion_rate_gbps

    return pd.Series({d: completion_rate_gbps(g["end"].to_numpy(), g["payload"].to_numpy() if "payload" in g else np.nan)
                      for d, g in spans.groupby("dump", sort=True) if len(g) >= 8}, dtype=np.float64)  # one fit per launch


def calibration_points(probes: pd.DataFrame, slices: pd.DataFrame, dumps: pd.DataFrame) -> pd.DataFrame:
    """Reduce burst spans per launch to the sweep's summary columns (medians and p90 over producers × bursts);
    the sweep point (dest, store, mode, K, B, G) comes from each dump's run configuration (the ``dumps`` table;
    a dump whose label names no store instruction is ``DEFAULT_STORE``)."""
    if dumps.empty or not dumps["mode"].isin(CALIBRATION_MODES).any():  # no calibration launch (e.g. a fused kernel's):
        return pd.DataFrame()  # decided before the set-up below, which costs ~4 ms per dump
    meta = dumps.astype({"dump": str}).drop_duplicates("dump").set_index("dump")
    meta = meta[meta["mode"].isin(CALIBRATION_MODES) & meta[["dest", "K", "B", "gap_ns"]].notna().all(axis=1)]
    if meta.empty:  # no calibration launch among these dumps (e.g. a fused kernel's)
        return pd.DataFrame()
    spans = burst_spans(probes)
    if spans.empty:
        return pd.DataFrame()
    spans = spans[spans["dump"].isin(meta.index)]
    warm = np.where(spans["dump"].map(meta["mode"]) == "periodic", PERIODIC_WARMUP_BURSTS, ISOLATED_WARMUP_BURSTS)
    use = spans[spans["burst"] >= warm]
    g = use.groupby("dump")
    out = pd.DataFrame({
        "tiss_med_ns": g["issue_ns"].median(),
        "tiss_p90_ns": g["issue_ns"].quantile(0.9),
        "period_med_ns": g["period_ns"].median(),
        "gap_meas_med_ns": g["gap_meas_ns"].median(),
        "bursts_used": g["burst"].nunique(),
    })
    out["completion_rate_gbps"] = completion_rates(use)
    npc = slices.groupby("dump")["ns_per_cycle"].median()
    out = meta.join(out, how="inner")
    out["ns_per_cycle"] = npc.reindex(out.index).values
    out["K"] = out["K"].astype(int)
    out["B"] = out["B"].astype(int)
    out["V"] = out["K"] * out["B"]
    out["store"] = out["store"].fillna(DEFAULT_STORE).astype(str) if "store" in out.columns else DEFAULT_STORE
    out["gap_ns"] = out["gap_ns"].astype(float)
    cols = ["dest", "store", "mode", "K", "B", "V", "gap_ns", "tiss_med_ns", "tiss_p90_ns", "period_med_ns", "ns_per_cycle",
            "gap_meas_med_ns", "bursts", "bursts_used", "completion_rate_gbps"]
    return out.reset_index().rename(columns={"index": "dump"})[["dump"] + cols].sort_values(["dest", "store", "mode", "K", "B", "gap_ns"]).reset_index(drop=True)
