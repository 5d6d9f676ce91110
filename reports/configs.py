"""Configurations of a run: the ``key=value`` fields of dump labels and NVTX range names
(``kernel=fused_moe dest=host shape=S1 schedule=wave …``), joined to kernel launches and tiles."""

from __future__ import annotations

import pandas as pd

CONFIG_KEYS = ("dest", "shape", "schedule", "kernel")
_FIELD = r"(?P<key>[A-Za-z_][\w.-]*)=(?P<value>\S+)"


def label_fields(labels: pd.Series) -> pd.DataFrame:
    """One column per ``key=value`` field of each label (parsed once per distinct label); missing → NA."""
    s = labels.astype("string")
    distinct = pd.Series(s.dropna().unique(), dtype="string")
    if distinct.empty:
        return pd.DataFrame(index=labels.index)
    found = distinct.str.extractall(_FIELD)
    wide = found.reset_index().pivot_table(index="level_0", columns="key", values="value", aggfunc="first")
    wide.index = distinct.iloc[wide.index].to_numpy()
    return wide.reindex(s.to_numpy()).set_axis(labels.index)


def kernel_trials(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel launch with its configuration: dest, shape, schedule (from the NVTX range
    it was launched in), ``kernel`` = the nsys short name, ``duration_ns`` (timing scope: kernel
    time, nsys clock). Fields absent from a range are empty strings."""
    f = label_fields(kernels["nvtx_range"]) if "nvtx_range" in kernels else pd.DataFrame(index=kernels.index)
    out = pd.DataFrame(index=kernels.index)
    for key in CONFIG_KEYS[:-1]:
        out[key] = f[key].fillna("").astype(str) if key in f else ""
    out["kernel"] = kernels["short_name"].fillna(kernels["name"]).astype(str)
    out["duration_ns"] = kernels["duration_ns"].astype("float64")
    return out.reset_index(drop=True)


def tile_configs(tiles: pd.DataFrame) -> pd.DataFrame:
    """The tiles with dest, shape, schedule (from their dump label) and ``kernel`` (the label's
    ``kernel=`` field) as columns."""
    f = label_fields(tiles["label"])
    out = tiles.copy()
    for key in CONFIG_KEYS:
        out[key] = f[key].fillna("").astype(str) if key in f else ""
    return out


def config_names(labels: pd.Series, keys=("dest", "shape", "schedule")) -> pd.Series:
    """``host S1 wave`` style names of labels (the fields ``keys`` that a label has)."""
    f = label_fields(labels)
    present = [k for k in keys if k in f]
    if not present:
        return labels.astype(str)
    return f[present].fillna("").astype(str).agg(" ".join, axis=1).str.strip()
