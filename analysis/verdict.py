"""Verdict per configuration: does this schedule stall the Tensor Cores (spec §5)?

The rule (one place, for the dashboard and the reports): over the Linear-2 tiles of one
configuration that can be backpressured (those with a remote-store span, ``rs_span_ns`` present),
the configuration **stalls** when the median measured stall exceeds the noise floor, or when the
median predicted stall Δt = [T_RS − T_cover]₊ does. The noise floor is the tiles' own ``noise_ns``
(derived from the control run by ``analysis.tiles``). "no stall" when both medians are at or
below it; "unknown" when neither median exists (no Linear-2 tile with a remote store).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

_FIELD = re.compile(r"([A-Za-z_]\w*)=(\S+)")
CONFIG_KEYS = ("dest", "shape", "schedule")
VARIANT_KEYS = ("layout", "operands", "epilogue")


def label_fields(labels: pd.Series) -> pd.DataFrame:
    """The ``key=value`` fields of dump labels (``kernel=fused_moe … dest=host shape=S1
    schedule=wave layout=split …``) as string columns, one row per label (missing keys are NA)."""
    uniq = labels.dropna().astype(str).unique()
    parsed = pd.DataFrame([dict(_FIELD.findall(u)) for u in uniq], index=uniq)  # one parse per distinct label
    return parsed.reindex(labels.astype(str).to_numpy()).set_axis(labels.index).astype("string")


def configurations(tiles: pd.DataFrame) -> pd.DataFrame:
    """Configuration columns per tile (categorical): dest, shape, schedule from the label, and
    ``variant`` (the tiles' own ``variant`` column, else ``layout/operands/epilogue`` from the
    label). Labels are parsed once per distinct label, then broadcast by code."""
    labels = tiles["label"] if "label" in tiles else pd.Series(pd.NA, index=tiles.index, dtype="string")
    codes, uniq = pd.factorize(labels, use_na_sentinel=True)
    fields = label_fields(pd.Series(uniq, dtype="string"))
    have = [k for k in VARIANT_KEYS if k in fields]
    if have:
        fields["variant"] = fields[have[0]].str.cat([fields[k] for k in have[1:]], sep="/", na_rep="")
    out = pd.DataFrame(index=tiles.index)
    for k in (*CONFIG_KEYS, "variant"):
        if k == "variant" and "variant" in tiles:
            out[k] = tiles["variant"].astype("category")
            continue
        per_label = pd.Categorical(fields[k] if k in fields else pd.Series(pd.NA, index=fields.index, dtype="string"))
        tile_codes = np.where(codes >= 0, per_label.codes[np.maximum(codes, 0)] if len(uniq) else -1, -1)
        out[k] = pd.Categorical.from_codes(tile_codes, categories=per_label.categories)
    return out


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
    store, their median predicted and measured stall, the noise floor, backpressured tiles and the
    verdict of :func:`stall_verdict`. Empty when there are no tiles."""
    cols = [*CONFIG_KEYS, "variant", "l2_tiles", "predicted_stall_med_ns", "measured_stall_med_ns",
            "noise_ns", "backpressured_tiles", "verdict"]
    if tiles.empty or "tile_kind" not in tiles:
        return pd.DataFrame(columns=cols)
    cfg = configurations(tiles)
    capable = (tiles["tile_kind"].astype(str) == "linear2") & tiles["rs_span_ns"].notna()
    t = pd.concat([cfg, tiles[["predicted_stall_ns", "measured_stall_ns", "noise_ns", "backpressured"]]], axis=1)[capable]
    keys = [*CONFIG_KEYS, "variant"]
    if t.empty:
        return pd.DataFrame(columns=cols)
    g = t.groupby(keys, dropna=False, sort=True)
    out = g.agg(l2_tiles=("predicted_stall_ns", "size"), predicted_stall_med_ns=("predicted_stall_ns", "median"),
                measured_stall_med_ns=("measured_stall_ns", "median"), noise_ns=("noise_ns", "max"),
                backpressured_tiles=("backpressured", "sum")).reset_index()
    out["backpressured_tiles"] = out["backpressured_tiles"].astype(int)
    out["verdict"] = stall_verdict(out["measured_stall_med_ns"], out["predicted_stall_med_ns"], out["noise_ns"])
    return out[cols]
