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
    fig = go.Figure([go.Bar(name="predicted", x=labels, y=verdicts["slot_model_stall_us"]),
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
    """Per-tile measured vs predicted stall of the Linear-2 tiles (µs, probe clock), a 2-D histogram
    with a log colour scale (tile counts span decades: thousands of covered tiles at 0, a few per
    bin along the diagonal), empty bins left blank."""
    t = tiles[tiles["tile_kind"] == "linear2"].dropna(subset=["predicted_stall_ns", "measured_stall_ns"])
    p, m = t["predicted_stall_ns"].to_numpy() / 1e3, t["measured_stall_ns"].to_numpy() / 1e3
    top = float(max(p.max(), m.max(), 1.0)) if len(t) else 1.0
    counts, xe, ye = np.histogram2d(p, m, bins=60, range=[[0, top], [0, top]])
    z = np.where(counts > 0, np.log10(np.maximum(counts, 1)), np.nan).T  # rows = measured bins
    zmax = max(float(np.nanmax(z)) if np.isfinite(z).any() else 0.0, 1.0)
    ticks = np.arange(0, np.ceil(zmax) + 1)
    fig = go.Figure(go.Heatmap(x=(xe[:-1] + xe[1:]) / 2, y=(ye[:-1] + ye[1:]) / 2, z=z, customdata=counts.T, colorscale="Viridis",
                               zmin=0, zmax=float(ticks[-1]), hovertemplate="pred %{x:.1f} µs<br>meas %{y:.1f} µs<br>%{customdata:.0f} tiles<extra></extra>",
                               colorbar=dict(title="tiles", tickvals=ticks.tolist(), ticktext=[f"{10 ** int(k):,}" for k in ticks])))
    fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", line=dict(dash="dash", color="black"), name="measured = predicted"))
    fig = _layout(fig, "Per-tile stall, Linear-2 tiles (probe clock per SM; colour: tiles per bin, log scale)", "predicted Δt (µs)", "measured Δt (µs)")
    return fig.update_layout(legend=dict(x=0.02, y=0.98))


def burst_plot(bursts: pd.DataFrame, labels: pd.Series) -> go.Figure:
    """Issue time of each burst over its index in the launch (sender-visible, µs, log axis: a
    covered burst issues in ~1 µs, a backpressured one waits tens), one line per configuration;
    hover: V, ρ, q."""
    b = bursts[bursts["issue_ns"] > 0].sort_values(["dump", "burst"])
    fig = go.Figure()
    for dump, g in b.groupby("dump", sort=True):  # one line per burst sequence
        fig.add_trace(go.Scatter(x=g["burst"], y=g["issue_ns"] / 1e3, mode="lines+markers", marker=dict(size=4), name=str(labels.get(dump, dump)),
                                 customdata=np.stack([g["volume_bytes"].to_numpy(), g["rho"].to_numpy(), g["q_bytes"].to_numpy()], axis=1),
                                 hovertemplate="burst %{x}<br>issue %{y:.3g} µs<br>V %{customdata[0]:.3s} B<br>ρ %{customdata[1]:.2f}<br>q %{customdata[2]:.3s} B"))
    if "issue_floor_ns" in b and b["issue_floor_ns"].notna().any():
        f = b.dropna(subset=["issue_floor_ns"]).groupby("burst")["issue_floor_ns"].median() / 1e3
        fig.add_trace(go.Scatter(x=f.index, y=f.to_numpy(), mode="lines", line=dict(dash="dash", color="black"), name="T_iss^0 (calibration)"))
    return _layout(fig, "Remote-store bursts: issue time per burst (sender-visible, probe clock per SM)", "burst index in the launch", "issue time (µs)", False, True)
