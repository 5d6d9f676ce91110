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


def run_trials(run) -> pd.DataFrame:
    """The run's kernel trials (``analysis.stall.kernel_trials``, the definition Table 3 uses): one
    row per (rank, configuration, trial), warm-ups (the manifest's ``warmup_launches``) left out,
    ``kernel_ms`` in nsys kernel time."""
    from xstage_trace.analysis.stall import kernel_trials

    return kernel_trials(run.kernels(), run.dumps(), int(run.manifest.get("warmup_launches") or 0))


def slowest_rank_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """docs/model.md §10 per trial: one row per (configuration, kernel, trial) with the slowest rank's
    ``kernel_ms`` and the ranks counted."""
    by = ["dest", "shape", "variant", "schedule", "kernel", "trial"]
    return trials.groupby(by, sort=True, dropna=False).agg(kernel_ms=("kernel_ms", "max"), ranks=("rank", "nunique")).reset_index()


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
