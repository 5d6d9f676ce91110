"""Interactive plotly versions of the report figures, for report.html (same data as figures.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from xstage_trace.reports.figures import config_label


def _layout(fig: go.Figure, title: str, x: str, y: str, log_x=False, log_y=False) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", height=420, margin=dict(l=60, r=20, t=50, b=80))
    if log_x:
        fig.update_xaxes(type="log")
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def stall_plot(verdicts: pd.DataFrame) -> go.Figure:
    """Predicted vs measured median MMA stall per configuration × schedule (µs, probe clock)."""
    keys = [c for c in ("dest", "shape", "variant", "kernel", "schedule") if c in verdicts]
    labels = [config_label(r, keys) for _, r in verdicts.iterrows()]
    fig = go.Figure([go.Bar(name="predicted", x=labels, y=verdicts["predicted_stall_us"]),
                     go.Bar(name="measured", x=labels, y=verdicts["measured_stall_us"])])
    if len(verdicts):
        fig.add_hline(y=float(verdicts["noise_us"].iloc[0]), line_dash="dash", annotation_text="noise floor")
    return _layout(fig, "Median MMA stall per Linear-2 tile (probe clock per SM)", "", "stall Δt (µs)")


def kernel_time_plot(trials: pd.DataFrame) -> go.Figure:
    """nsys kernel time of every trial per configuration (ms, per trial the slowest rank)."""
    names = trials[["dest", "shape", "variant", "schedule", "kernel"]].astype(str).agg(" ".join, axis=1).str.strip()
    fig = go.Figure(go.Box(x=names, y=trials["kernel_ms"], boxpoints="all", name="trials"))
    return _layout(fig, "Kernel time per trial (nsys kernel time, slowest rank)", "", "kernel time (ms)")


def tile_stall_plot(tiles: pd.DataFrame) -> go.Figure:
    """Per-tile measured vs predicted stall of the Linear-2 tiles (µs, probe clock), 2-D histogram."""
    t = tiles[tiles["tile_kind"] == "linear2"].dropna(subset=["predicted_stall_ns", "measured_stall_ns"])
    p, m = t["predicted_stall_ns"] / 1e3, t["measured_stall_ns"] / 1e3
    fig = go.Figure(go.Histogram2d(x=p, y=m, nbinsx=60, nbinsy=60, colorscale="Viridis", zmin=1))
    top = float(max(p.max(), m.max(), 1.0)) if len(t) else 1.0
    fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", line=dict(dash="dash", color="black"), name="measured = predicted"))
    return _layout(fig, "Per-tile stall, Linear-2 tiles (probe clock per SM)", "predicted Δt (µs)", "measured Δt (µs)")


def burst_plot(bursts: pd.DataFrame, labels: pd.Series) -> go.Figure:
    """Issue time vs volume per burst (sender-visible), one trace per configuration, hover: ρ, q."""
    b = bursts[(bursts["volume_bytes"] > 0) & (bursts["issue_ns"] > 0)]
    fig = go.Figure()
    for dump, g in b.groupby("dump", sort=True):  # one trace per burst sequence
        fig.add_trace(go.Scattergl(x=g["volume_bytes"], y=g["issue_ns"], mode="markers", marker=dict(size=4), name=str(labels.get(dump, dump)),
                                   customdata=np.stack([g["rho"].to_numpy(), g["q_bytes"].to_numpy()], axis=1),
                                   hovertemplate="V %{x:.3s} B<br>issue %{y:.0f} ns<br>ρ %{customdata[0]:.2f}<br>q %{customdata[1]:.3s} B"))
    return _layout(fig, "Remote-store bursts (sender-visible, probe clock per SM)", "burst volume V (bytes)", "issue time (ns)", True, True)
