"""``analyze --nvtx PATTERN [--nvtx-domain DOMAIN]``: restrict collected tables to the kernels
launched under matching NVTX ranges (the region of interest of a real model run).

A range matches when its name matches PATTERN and, with ``--nvtx-domain``, its domain matches
DOMAIN (without it, ranges of every domain, the default one included, take part; with only
``--nvtx-domain``, every range of that domain matches). Both are an exact name, or a glob when
they hold ``*``, ``?`` or ``[``. The domain is a separate option rather than a ``DOMAIN::NAME``
prefix because range names such as ``aten::mm`` already hold ``::``.

A kernel is *under* a matching range when the CUDA runtime call that launched it (the kernels
table's ``launch_ns`` on thread ``launch_global_tid``) lies inside that range on the same thread:
exact for nested ranges of any domain, and for ranges of different domains that overlap without
nesting. Probe dumps are kept when the kernel they lie in (pairing) is kept; GPU-metric samples
when they fall inside a kept kernel's interval; NVTX ranges when they lie inside a matching range
on the same thread.
"""

from __future__ import annotations

import fnmatch

import numpy as np
import pandas as pd
import pyarrow as pa

from xstage_trace.base.errors import InputError
from xstage_trace.base.schema import conform
from xstage_trace.collectors.collect import keep_slices


def name_matches(names: pd.Series, pattern: str) -> np.ndarray:
    """Exact match, or glob match when ``pattern`` has glob characters."""
    names = names.astype("string")
    if not any(ch in pattern for ch in "*?["):
        return (names == pattern).fillna(False).to_numpy(bool)
    distinct = names.dropna().unique()  # few distinct names: match each once
    hit = {n for n in distinct if fnmatch.fnmatchcase(n, pattern)}
    return names.isin(hit).fillna(False).to_numpy(bool)


def _covered(query: pd.DataFrame, matched: pd.DataFrame) -> np.ndarray:
    """For every row of ``query`` (rank, global_tid, start_ns, end_ns): does one ``matched`` range of
    the same rank and thread contain [start_ns, end_ns]? Per thread, it does when the running
    maximum end of the matched ranges starting at or before start_ns reaches end_ns (the range
    achieving that maximum contains it)."""
    out = np.zeros(len(query), bool)
    cols = ["rank", "global_tid", "start_ns", "end_ns"]
    q = query.reset_index(drop=True).assign(_row=np.arange(len(query))).dropna(subset=cols)
    m = matched.dropna(subset=cols)
    if m.empty or q.empty:
        return out
    keys = {"rank": np.int64, "global_tid": np.int64, "start_ns": np.int64}
    m = m.astype(keys).sort_values("start_ns")
    m = m.assign(cover_end=m.groupby(["rank", "global_tid"])["end_ns"].cummax())[["rank", "global_tid", "start_ns", "cover_end"]]
    q = q.astype(keys)[["rank", "global_tid", "start_ns", "end_ns", "_row"]].sort_values("start_ns")
    j = pd.merge_asof(q, m, on="start_ns", by=["rank", "global_tid"], direction="backward")
    out[j["_row"].to_numpy()] = (j["cover_end"] >= j["end_ns"]).fillna(False).to_numpy(bool)
    return out


def under_matching(ranges: pd.DataFrame, matched: np.ndarray) -> np.ndarray:
    """For every NVTX range: is it inside (or equal to) a matched range of the same rank and thread?"""
    return _covered(ranges, ranges[matched])


def launched_under(kernels: pd.DataFrame, ranges: pd.DataFrame, matched: np.ndarray) -> np.ndarray:
    """For every kernel: did its launch call (``launch_ns`` on ``launch_global_tid``) lie inside a
    matched range of the same rank and thread? False for kernels whose launch is unknown."""
    launches = pd.DataFrame({"rank": kernels["rank"].to_numpy(), "global_tid": kernels["launch_global_tid"].to_numpy(),
                             "start_ns": kernels["launch_ns"].to_numpy(), "end_ns": kernels["launch_ns"].to_numpy()})
    return _covered(launches, ranges[matched])


def matching_ranges(ranges: pd.DataFrame, pattern: str | None, domain: str | None) -> np.ndarray:
    """Ranges whose name matches ``pattern`` (any name when None) and whose domain matches ``domain``
    (any domain, the default one included, when None); no matching range → InputError naming a few
    of the names and domains that exist."""
    if not len(ranges):
        raise InputError(None, f"no NVTX range matches {_selector(pattern, domain)}: the run holds no NVTX ranges (no nsys export, or one captured without nvtx)",
                         "capture with nsys profile -t cuda,nvtx, and mark the region of interest with NVTX ranges")
    in_domain = name_matches(ranges["domain"], domain) if domain is not None else np.ones(len(ranges), bool)
    matched = in_domain & (name_matches(ranges["name"], pattern) if pattern is not None else True)
    if matched.any():
        return matched
    named = sorted(ranges["domain"].dropna().astype(str).unique())
    domains = ", ".join((["default"] if ranges["domain"].isna().any() else []) + [repr(d) for d in named[:5]])
    if not in_domain.any():
        raise InputError(None, f"no NVTX domain matches --nvtx-domain {domain!r} (the capture's domains: {domains})",
                         "give a domain name exactly or a glob; leave out --nvtx-domain to match ranges of every domain")
    distinct = sorted(ranges["name"][in_domain].dropna().astype(str).unique())
    some = "; ".join(repr(n[:60]) for n in distinct[:3]) or "none"
    where = f"in domain {domain!r}" if domain is not None else f"in domains: {domains}"
    raise InputError(None, f"no NVTX range matches {_selector(pattern, domain)} ({len(distinct)} range names {where}; e.g. {some})",
                     "give a range name exactly or a glob such as '*schedule=wave*'")


def _selector(pattern: str | None, domain: str | None) -> str:
    """The options as the user gave them, for messages."""
    return " ".join(([f"--nvtx {pattern!r}"] if pattern is not None else []) + ([f"--nvtx-domain {domain!r}"] if domain is not None else []))


def _inside(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Is each time inside one of the intervals [start, end]?"""
    order = np.argsort(starts)
    s, e = starts[order], np.maximum.accumulate(ends[order])
    i = np.searchsorted(s, t, side="right") - 1
    return (i >= 0) & (t <= e[np.maximum(i, 0)])


def restrict_to_nvtx(plan, pattern: str | None, domain: str | None = None):
    """The run ``Plan`` kept to the kernels launched under NVTX ranges matching ``pattern`` and
    ``domain`` (module docstring): its kernels, ranges, metric samples, and the dumps (with their
    tasks and slice parts) that lie in a kept kernel; the manifest records the filter. No matching range, or no
    kernel under one → InputError."""
    t = plan.tables
    ranges = t["nvtx"].to_pandas()
    matched = matching_ranges(ranges, pattern, domain)
    covered = under_matching(ranges, matched)
    kernels = t["kernels"].to_pandas()
    keep_k = launched_under(kernels, ranges, matched)
    if not keep_k.any():
        raise InputError(None, f"no kernel was launched under an NVTX range matching {_selector(pattern, domain)}",
                         "check the range name (nsys stats --report nvtx_sum lists them)")
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
        keys = set(zip(kept["rank"].astype(int), kept["dump"].astype(str)))
        out["dumps"] = pa.Table.from_pandas(kept, preserve_index=False)
        keep_slices(plan, keys)  # the left-out dumps' slices, already in the run's temporary folder, go
        plan.tasks = [task for task in plan.tasks if (task.rank, task.dump) in keys]
        if dumps["is_control"].any() and not kept["is_control"].any():
            plan.warnings.append(f"{_selector(pattern, domain)} left out every control dump (dest=local / control=1): the slot-wait floor and "
                                 "backpressure noise fall back to defaults; include a control range to keep them")
    plan.tables = {n: conform(n, tab) for n, tab in out.items()}
    plan.manifest = dict(plan.manifest, nvtx_filter={"pattern": pattern, "domain": domain, "ranges_matched": int(matched.sum()), "kernels_kept": int(keep_k.sum()),
                                                     "kernels_total": len(kernels)})
    return plan
