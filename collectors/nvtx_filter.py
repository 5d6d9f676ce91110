"""``analyze --nvtx NAME``: restrict collected tables to the kernels launched under matching NVTX
ranges (the region of interest of a real model run).

A kernel is *under* a range R when the innermost range it was launched from (``nvtx_range``,
attributed by the nsys reader through the CUDA runtime call) is R or lies inside R on the same
thread. NAME matches a range name exactly, or as a glob when it holds ``*``, ``?`` or ``[``.
Probe dumps are kept when the kernel they lie in (pairing) is kept; GPU-metric samples when they
fall inside a kept kernel's interval; NVTX ranges when they are under a matching range.

The kernels table holds the name of the innermost launch range but not the launch time or
thread, so the range *instance* is taken as the latest range of that name that began before the
kernel started. When the host runs far ahead of the GPU, that can be a later instance of the same
name; it only matters when such instances sit under differently named outer ranges. A launch-time
column in the kernels table would make the lookup exact.
"""

from __future__ import annotations

import fnmatch

import numpy as np
import pandas as pd
import pyarrow as pa

from xstage_trace.base.errors import InputError
from xstage_trace.base.schema import conform


def name_matches(names: pd.Series, pattern: str) -> np.ndarray:
    """Exact match, or glob match when ``pattern`` has glob characters."""
    names = names.astype("string")
    if not any(ch in pattern for ch in "*?["):
        return (names == pattern).fillna(False).to_numpy(bool)
    distinct = names.dropna().unique()  # few distinct names: match each once
    hit = {n for n in distinct if fnmatch.fnmatchcase(n, pattern)}
    return names.isin(hit).fillna(False).to_numpy(bool)


def under_matching(ranges: pd.DataFrame, matched: np.ndarray) -> np.ndarray:
    """For every NVTX range: is it inside (or equal to) a matched range of the same rank and thread?
    Per thread, a range is covered when the running maximum end of the matched ranges starting at
    or before it reaches its end (the range achieving that maximum contains it)."""
    r = ranges.reset_index(drop=True).assign(_row=np.arange(len(ranges)))
    m = r[matched].sort_values("start_ns")
    if m.empty:
        return np.zeros(len(r), bool)
    m = m.assign(cover_end=m.groupby(["rank", "global_tid"])["end_ns"].cummax())[["rank", "global_tid", "start_ns", "cover_end"]]
    q = r[["rank", "global_tid", "start_ns", "end_ns", "_row"]].sort_values("start_ns")
    j = pd.merge_asof(q, m, on="start_ns", by=["rank", "global_tid"], direction="backward")
    out = np.zeros(len(r), bool)
    out[j["_row"].to_numpy()] = (j["cover_end"] >= j["end_ns"]).fillna(False).to_numpy(bool)
    return out


def kernel_instances(kernels: pd.DataFrame, ranges: pd.DataFrame) -> np.ndarray:
    """Row in ``ranges`` of each kernel's innermost launch range: the latest range of that name (and
    rank) that began before the kernel started (a launch precedes its kernel); −1 if none."""
    r = ranges.reset_index(drop=True).assign(_row=np.arange(len(ranges)))[["rank", "name", "start_ns", "_row"]]
    k = kernels.reset_index(drop=True).assign(_k=np.arange(len(kernels)))
    k = k.dropna(subset=["nvtx_range"])[["rank", "nvtx_range", "start_ns", "_k"]].rename(columns={"nvtx_range": "name"})
    out = np.full(len(kernels), -1)
    if k.empty or r.empty:
        return out
    r = r.assign(name=r["name"].astype(str)).sort_values("start_ns")
    k = k.assign(name=k["name"].astype(str)).sort_values("start_ns")
    j = pd.merge_asof(k, r, on="start_ns", by=["rank", "name"], direction="backward")
    ok = j["_row"].notna().to_numpy()
    out[j["_k"].to_numpy()[ok]] = j["_row"].to_numpy()[ok].astype(int)
    return out


def _inside(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Is each time inside one of the intervals [start, end]?"""
    order = np.argsort(starts)
    s, e = starts[order], np.maximum.accumulate(ends[order])
    i = np.searchsorted(s, t, side="right") - 1
    return (i >= 0) & (t <= e[np.maximum(i, 0)])


def restrict_to_nvtx(plan, pattern: str):
    """The run ``Plan`` kept to the kernels under NVTX ranges matching ``pattern`` (module docstring):
    its kernels, ranges, metric samples, and the dumps (with their tasks) that lie in a kept kernel;
    the manifest records the filter. No matching range, or no kernel under one → InputError."""
    t = plan.tables
    ranges = t["nvtx"].to_pandas()
    matched = name_matches(ranges["name"], pattern) if len(ranges) else np.zeros(0, bool)
    if not matched.any():
        distinct = sorted(ranges["name"].dropna().astype(str).unique()) if len(ranges) else []
        some = "; ".join(repr(n[:60]) for n in distinct[:3]) or "none"
        raise InputError(None, f"no NVTX range matches --nvtx {pattern!r} ({len(distinct)} range names, e.g. {some})",
                         "give a range name exactly or a glob such as '*schedule=wave*'")
    covered = under_matching(ranges, matched)
    kernels = t["kernels"].to_pandas()
    inst = kernel_instances(kernels, ranges)
    keep_k = (inst >= 0) & covered[np.maximum(inst, 0)]
    if not keep_k.any():
        raise InputError(None, f"no kernel was launched under an NVTX range matching {pattern!r}", "check the range name (nsys stats --report nvtx_sum lists them)")
    k = kernels[keep_k]
    starts, ends = k["start_ns"].to_numpy(np.float64), k["end_ns"].to_numpy(np.float64)
    out = dict(t, kernels=pa.Table.from_pandas(k, preserve_index=False), nvtx=pa.Table.from_pandas(ranges[covered], preserve_index=False))
    gm = t["gpu_metrics"]
    if gm.num_rows:
        out["gpu_metrics"] = gm.filter(pa.array(_inside(gm["timestamp_ns"].to_numpy().astype(np.float64), starts, ends)))
    dumps = t["dumps"].to_pandas()
    if len(dumps):
        ki = dumps["kernel_index"].to_numpy(dtype=np.float64, na_value=np.nan)
        held = np.isfinite(ki)
        keep_d = held & keep_k[np.where(held, ki, 0).astype(int)]
        new_index = np.cumsum(keep_k) - 1  # a kept kernel's row in the filtered table
        kept = dumps[keep_d].assign(kernel_index=new_index[ki[keep_d].astype(int)])
        keys = set(zip(kept["rank"], kept["dump"].astype(str)))
        out["dumps"] = pa.Table.from_pandas(kept, preserve_index=False)
        sl = t["probe_slices"].to_pandas()
        out["probe_slices"] = pa.Table.from_pandas(sl[pd.MultiIndex.from_arrays([sl["rank"], sl["dump"].astype(str)]).isin(list(keys))], preserve_index=False)
        plan.tasks = [task for task in plan.tasks if (task.rank, task.dump) in keys]
        if dumps["is_control"].any() and not kept["is_control"].any():
            plan.warnings.append(f"--nvtx {pattern!r} left out every control dump (dest=local / control=1): the slot-wait floor and "
                                 "backpressure noise fall back to defaults; include a control range to keep them")
    plan.tables = {n: conform(n, tab) for n, tab in out.items()}
    plan.manifest = dict(plan.manifest, nvtx_filter={"pattern": pattern, "ranges_matched": int(matched.sum()), "kernels_kept": int(keep_k.sum()),
                                                     "kernels_total": len(kernels)})
    return plan
