"""Configurations of a run: the typed run configuration (base/config.py, the one label parser) of
dump labels and NVTX range names (``kernel=fused_moe dest=host shape=S1 schedule=wave …``), joined
to kernel launches and tiles."""

from __future__ import annotations

import pandas as pd

CONFIG_KEYS = ("dest", "shape", "schedule", "kernel")


def label_fields(labels: pd.Series) -> pd.DataFrame:
    """The run-configuration fields of each label (``RunConfig.from_label``, once per distinct label);
    a label that is no run configuration (any NVTX range name) has none."""
    from xstage_trace.base.config import ConfigError, RunConfig

    s = labels.astype("string")
    rows = {}
    for text in s.dropna().unique():  # few distinct labels per run
        try:
            rows[text] = {k: v for k, v in RunConfig.from_label(str(text)).columns().items() if v is not None}
        except ConfigError:
            rows[text] = {}
    if not rows:
        return pd.DataFrame(index=labels.index)
    wide = pd.DataFrame.from_dict(rows, orient="index")
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


def tile_configs(tiles: pd.DataFrame, dumps: pd.DataFrame | None = None) -> pd.DataFrame:
    """The tiles with dest, shape, schedule (their configuration columns) and ``kernel`` (the
    ``kernel=`` field of their dump's configuration, from the ``dumps`` table) as text columns."""
    out = tiles.copy()
    if "kernel" not in out and dumps is not None and len(dumps):
        out = out.merge(dumps[["rank", "dump", "kernel"]].astype({"dump": str}), on=["rank", "dump"], how="left")
    for key in CONFIG_KEYS:
        out[key] = out[key].fillna("").astype(str) if key in out else ""
    return out


def config_names(labels: pd.Series, keys=("dest", "shape", "schedule")) -> pd.Series:
    """``host S1 wave`` style names of labels (the fields ``keys`` that a label has)."""
    f = label_fields(labels)
    present = [k for k in keys if k in f]
    if not present:
        return labels.astype(str)
    return f[present].fillna("").astype(str).agg(" ".join, axis=1).str.strip()
