"""Static figures (matplotlib Figures on Agg canvases) for the reports, written as SVG and PNG side by side.

Each ``*_figure`` function takes frames from the run API (or the verdict table) and returns a
matplotlib Figure; ``save_figure`` writes it. The same data feed the interactive plotly figures
of report.html (reports/interactive.py).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from xstage_trace.base.atomic import atomic_file

FORMATS = ("svg", "png")
PNG_DPI = 110
# Deterministic SVG/PNG: no creation date, fixed element ids.
_RC = {"svg.hashsalt": "xstage-trace"}
_METADATA = {"svg": {"Date": None, "Creator": "xstage-trace"}, "png": {"Software": "xstage-trace"}}


def new_figure(title: str, x_label: str, y_label: str, log_x: bool = False, log_y: bool = False, size=(7.0, 4.2)):
    """A titled figure with one axes (grid on, optional log axes), on its own Agg canvas (no pyplot,
    no global backend switch)."""
    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    return fig, ax


def save_figure(fig: Figure, folder: str | Path, stem: str) -> list[Path]:
    """Write ``stem.svg`` and ``stem.png`` into ``folder`` (each through a temporary file)."""
    paths = []
    for fmt in FORMATS:
        buf = io.BytesIO()
        with matplotlib.rc_context(_RC):
            fig.savefig(buf, format=fmt, dpi=PNG_DPI, metadata=_METADATA[fmt])
        path = Path(folder) / f"{stem}.{fmt}"
        with atomic_file(path, "wb") as fh:
            fh.write(buf.getvalue())
        paths.append(path)
    return paths


def config_label(row: pd.Series, keys) -> str:
    """``host S1`` style label of a configuration row."""
    return " ".join(str(row[k]) for k in keys if k in row and str(row[k]) not in ("", "nan"))


def stall_figure(verdicts: pd.DataFrame) -> Figure:
    """Predicted vs measured median MMA stall (docs/model.md §5) per configuration and schedule, as bars
    (µs, probe clock per SM), with the noise floor as a line."""
    keys = [c for c in ("dest", "shape", "variant", "kernel", "schedule") if c in verdicts]
    labels = [config_label(r, keys) for _, r in verdicts.iterrows()]  # one bar pair per configuration
    fig, ax = new_figure("Median MMA stall per tile, Linear-2 (timing scope: probe clock per SM)", "", "stall Δt (µs)",
                         size=(max(6.0, 0.8 * len(labels) + 2), 4.2))
    x = np.arange(len(labels))
    ax.bar(x - 0.2, verdicts["slot_model_stall_us"].fillna(0), 0.4, label="predicted [T_lead + T_RS − T_cover]₊")
    ax.bar(x + 0.2, verdicts["measured_stall_us"].fillna(0), 0.4, label="measured (slot wait + compute beyond the control)")
    if len(verdicts):
        ax.axhline(float(verdicts["noise_us"].iloc[0]), color="k", lw=0.8, ls="--", label="noise floor")
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=8)
    return fig


def kernel_time_figure(trials: pd.DataFrame) -> Figure:
    """nsys kernel time of every trial per configuration (ms, timing scope: kernel time, per trial
    the slowest rank), dots per trial and a bar at the median."""
    keys = ["dest", "shape", "variant", "schedule", "kernel"]
    groups = list(trials.astype({k: str for k in keys}).groupby(keys, sort=True))
    fig, ax = new_figure("Kernel time per trial (timing scope: nsys kernel time, slowest rank)", "", "kernel time (ms)",
                         size=(max(6.0, 0.7 * len(groups) + 2), 4.2))
    for i, (key, g) in enumerate(groups):  # one column of dots per configuration
        ms = g["kernel_ms"].to_numpy()
        ax.plot(np.full(len(ms), i), ms, "o", ms=3, alpha=0.6, color="C0")
        ax.plot([i - 0.3, i + 0.3], [np.median(ms)] * 2, color="C3", lw=2)
    ax.set_xticks(range(len(groups)), [" ".join(k for k in key if k not in ("", "-", "None", "nan")) for key, _ in groups], rotation=30, ha="right", fontsize=7)
    return fig


def tile_stall_figure(tiles: pd.DataFrame) -> Figure:
    """Per-tile measured vs predicted stall of the Linear-2 tiles (µs, probe clock per SM) as a
    2-D histogram (log colour), with the diagonal."""
    t = tiles[(tiles["tile_kind"] == "linear2")].dropna(subset=["predicted_stall_ns", "measured_stall_ns"])
    fig, ax = new_figure("Per-tile stall, Linear-2 tiles (timing scope: probe clock per SM)", "predicted Δt (µs)", "measured Δt (µs)")
    if len(t):
        p, m = t["predicted_stall_ns"].to_numpy() / 1e3, t["measured_stall_ns"].to_numpy() / 1e3
        top = float(max(p.max(), m.max(), 1.0))
        _, _, _, im = ax.hist2d(p, m, bins=60, range=[[0, top], [0, top]], cmin=1, norm=LogNorm(), rasterized=True)
        fig.colorbar(im, ax=ax, label="tiles")
        ax.plot([0, top], [0, top], "k--", lw=0.8, label="measured = predicted")
        ax.legend(fontsize=8)
    return fig


def burst_figure(bursts: pd.DataFrame) -> Figure:
    """Remote-store bursts (docs/model.md §4): issue time of each burst over its index in the launch
    (sender-visible, µs on a log axis), one line per burst sequence, and the calibrated floor T_iss^0
    where a calibration was given."""
    fig, ax = new_figure("Remote-store bursts: issue time per burst (sender-visible, probe clock per SM)", "burst index in the launch",
                         "issue time (µs)", log_y=True, size=(9.0, 4.6))
    b = bursts[bursts["issue_ns"] > 0].sort_values(["dump", "burst"])
    for dump, g in b.groupby("dump", sort=True):  # one line per burst sequence
        label = " ".join(str(g[k].iloc[0]) for k in ("dest", "shape", "schedule") if k in g)
        ax.plot(g["burst"], g["issue_ns"] / 1e3, "o-", ms=2.5, lw=0.8, label=label or str(dump))
    if "issue_floor_ns" in b and b["issue_floor_ns"].notna().any():
        f = b.dropna(subset=["issue_floor_ns"]).groupby("burst")["issue_floor_ns"].median() / 1e3
        ax.plot(f.index, f.to_numpy(), "k--", lw=1, label="T_iss^0 (calibration)")
    if len(b):
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: the lines fill the plot
    return fig
