"""The dashboard's access to run datasets: only through ``xstage_trace.open_run``, cached per run
folder (keyed by the manifest's modification time, so a re-analyzed run is re-read). Cached
frames are shared between reruns and pages: treat them as read-only."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from xstage_trace import open_run
from xstage_trace.dataset.api import Run


SPAN_EVENTS = ("mainloop", "slot_wait", "rs", "ls", "burst")  # fused kernel, and the calibration benchmark's bursts


def stamp(path: str) -> float:
    """The run's version for cache keys: its manifest's modification time."""
    return (Path(path) / "manifest.json").stat().st_mtime





@st.cache_resource(show_spinner=False, max_entries=8)
def _run(path: str, stamp: float) -> Run:
    return open_run(path)


def run(path: str) -> Run:
    """The Run of a folder (opened once per manifest version)."""
    return _run(path, stamp(path))


@st.cache_resource(show_spinner="Reading the run…", max_entries=64)
def _frame(path: str, stamp: float, name: str) -> pd.DataFrame:
    return getattr(_run(path, stamp), name)()


def frame(path: str, name: str) -> pd.DataFrame:
    """``Run.<name>()`` (kernels, nvtx, gpu_metrics, bursts, tiles, table3, calibration, alignment)."""
    return _frame(path, stamp(path), name)


@st.cache_resource(show_spinner=False, max_entries=16)
def _kernel_summary(path: str, stamp: float) -> tuple[int, pd.DataFrame]:
    from xstage_trace.app.shaping import kernel_summary

    k = _run(path, stamp).table("kernels", columns=["name", "short_name", "duration_ns"])
    return k.num_rows, kernel_summary(k.to_pandas())


def kernel_summary(path: str) -> tuple[int, pd.DataFrame]:
    """(kernel launches, shaping.kernel_summary) of the run, from the three kernel columns it needs."""
    return _kernel_summary(path, stamp(path))


@st.cache_resource(show_spinner=False, max_entries=16)
def _tile_counts(path: str, stamp: float) -> tuple[int, int]:
    import pyarrow.compute as pc

    bp = _run(path, stamp).table("tiles", columns=["backpressured"])["backpressured"]
    return bp.length(), int(pc.sum(bp).as_py() or 0)


def tile_counts(path: str) -> tuple[int, int]:
    """(tiles, backpressured tiles) of the run, from the tiles' ``backpressured`` column alone."""
    return _tile_counts(path, stamp(path))


@st.cache_resource(show_spinner=False, max_entries=16)
def _tiles_cfg(path: str, stamp: float) -> pd.DataFrame:
    from xstage_trace.app.shaping import with_config

    t = _frame(path, stamp, "tiles")
    if t.empty:
        return t
    # few distinct values: categorical, so that filtering a million tiles does not copy strings
    return with_config(t.astype({c: "category" for c in ("dump", "tile_kind") if c in t}))


def tiles_with_config(path: str) -> pd.DataFrame:
    """Tiles with their configuration columns (shaping.with_config); dump, label and tile_kind categorical."""
    return _tiles_cfg(path, stamp(path))


@st.cache_resource(show_spinner=False, max_entries=16)
def _verdicts(path: str, stamp: float) -> pd.DataFrame:
    from xstage_trace.reports.verdict_text import verdict_table, with_sentences

    return with_sentences(verdict_table(_run(path, stamp)))


def verdicts(path: str) -> pd.DataFrame:
    """The run's verdict per configuration and schedule (Run.verdicts(), µs / ms columns added) with
    its sentence (reports/verdict_text), stall-bound first."""
    return _verdicts(path, stamp(path))


@st.cache_resource(show_spinner=False, max_entries=64)
def _spans(path: str, stamp: float, dump: str) -> pd.DataFrame:
    return _run(path, stamp).probe_spans(dump, events=SPAN_EVENTS)


def spans(path: str, dump: str) -> pd.DataFrame:
    """Run.probe_spans of one dump (SPAN_EVENTS), all of it, cached."""
    return _spans(path, stamp(path), dump)


@st.cache_resource(show_spinner=False, max_entries=16)
def _dump_index(path: str, stamp: float) -> pd.DataFrame:
    t = _tiles_cfg(path, stamp)
    if t.empty:
        return pd.DataFrame(columns=["dump", "config", "tiles", "backpressured"])
    g = t.groupby("dump", observed=True)
    return pd.DataFrame({"config": g["config"].first().astype(str), "tiles": g.size(),
                         "backpressured": g["backpressured"].sum()}).reset_index().astype({"dump": str})


def dump_index(path: str) -> pd.DataFrame:
    """One row per fused-kernel dump: its configuration name, tiles and backpressured tiles."""
    return _dump_index(path, stamp(path))


@st.cache_resource(show_spinner=False, max_entries=64)
def _dump_tiles(path: str, stamp: float, dump: str) -> pd.DataFrame:
    t = _tiles_cfg(path, stamp)
    return t[t["dump"] == dump] if len(t) else t


def dump_tiles(path: str, dump: str) -> pd.DataFrame:
    """The tiles of one dump (cached)."""
    return _dump_tiles(path, stamp(path), dump)


@st.cache_resource(show_spinner=False, max_entries=16)
def _metric_names(path: str, stamp: float) -> list[str]:
    gm = _frame(path, stamp, "gpu_metrics")
    return sorted(gm["metric"].astype("category").cat.remove_unused_categories().cat.categories.astype(str)) if len(gm) else []


def metric_names(path: str) -> list[str]:
    """The GPU metrics present in the run."""
    return _metric_names(path, stamp(path))
