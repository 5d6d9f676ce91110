"""The dashboard's access to run datasets: only through ``xstage_trace.open_run``, cached per run
folder (keyed by the manifest's modification time, so a re-analyzed run is re-read). Cached
frames are shared between reruns and pages: treat them as read-only."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from xstage_trace import open_run
from xstage_trace.api import Run


SPAN_EVENTS = ("mainloop", "slot_wait", "rs", "ls", "burst")  # fused kernel, and the calibration benchmark's bursts


def _stamp(path: str) -> float:
    return (Path(path) / "manifest.json").stat().st_mtime


@st.cache_resource(show_spinner=False, max_entries=8)
def _run(path: str, stamp: float) -> Run:
    return open_run(path)


def run(path: str) -> Run:
    """The Run of a folder (opened once per manifest version)."""
    return _run(path, _stamp(path))


@st.cache_resource(show_spinner="Reading the run…", max_entries=64)
def _frame(path: str, stamp: float, name: str) -> pd.DataFrame:
    return getattr(_run(path, stamp), name)()


def frame(path: str, name: str) -> pd.DataFrame:
    """``Run.<name>()`` (kernels, nvtx, gpu_metrics, bursts, tiles, table3, calibration, alignment)."""
    return _frame(path, _stamp(path), name)


@st.cache_resource(show_spinner=False, max_entries=16)
def _tiles_cfg(path: str, stamp: float) -> pd.DataFrame:
    from xstage_trace.app.shaping import with_config

    t = _frame(path, stamp, "tiles")
    return with_config(t) if not t.empty else t


def tiles_with_config(path: str) -> pd.DataFrame:
    """Tiles with their configuration columns (shaping.with_config)."""
    return _tiles_cfg(path, _stamp(path))


@st.cache_resource(show_spinner=False, max_entries=16)
def _verdicts(path: str, stamp: float) -> pd.DataFrame:
    from xstage_trace.analysis.verdict import configuration_verdicts

    return configuration_verdicts(_frame(path, stamp, "tiles"))


def verdicts(path: str) -> pd.DataFrame:
    """analysis.verdict.configuration_verdicts over the run's tiles."""
    return _verdicts(path, _stamp(path))


@st.cache_resource(show_spinner=False, max_entries=64)
def _spans(path: str, stamp: float, dump: str) -> pd.DataFrame:
    return _run(path, stamp).probe_spans(dump, events=SPAN_EVENTS)


def spans(path: str, dump: str) -> pd.DataFrame:
    """Run.probe_spans of one dump (SPAN_EVENTS), all of it, cached."""
    return _spans(path, _stamp(path), dump)
