"""Plotly figures for the dashboard: each takes shaped data (app/shaping.py) and returns a Figure.
No data access and no model math here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

COLORS = {
    "mainloop": "#9aa8b8",
    "slot wait": "#f2a541",
    "remote store": "#4c78a8",
    "remote store (backpressured)": "#c4161c",
    "local store": "#72b7b2",
    "kernel": "#59a14f",
    "NVTX": "#b07aa1",
}
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=40, b=40), legend=dict(orientation="h", y=-0.12))
# figures with an x-axis title and many traces: the legend beside the plot, clear of the axis title
SIDE_LEGEND = dict(LAYOUT, legend=dict(orientation="v", x=1.02, y=1.0, xanchor="left", yanchor="top", font=dict(size=11)))


def _bars(df: pd.DataFrame, y, name: str, color: str, origin_ns: float, text=None, width=0.6) -> go.Bar:
    return go.Bar(orientation="h", base=(df["start_ns"] - origin_ns) / 1e3, x=(df["end_ns"] - df["start_ns"]) / 1e3,
                  y=y, width=width, marker_color=color, name=name, hovertext=text, hoverinfo="text+name",
                  showlegend=True)


def nvtx_labels(nvtx: pd.DataFrame) -> pd.Series:
    """Each NVTX range's name, with its domain when it has one (not the default domain)."""
    domain = nvtx["domain"] if "domain" in nvtx else pd.Series(None, index=nvtx.index, dtype=object)
    return nvtx["name"].astype(str) + np.where(domain.notna(), " (domain " + domain.astype(str) + ")", "")


def timeline_figure(kernels: pd.DataFrame, nvtx: pd.DataFrame, metrics: pd.DataFrame, spans: pd.DataFrame | None,
                    heat: tuple[np.ndarray, np.ndarray, np.ndarray] | None, heat_label: str, origin_ns: float,
                    start_ns: float, end_ns: float, highlight: pd.DataFrame | None = None) -> go.Figure:
    """One shared time axis (µs from ``origin_ns``): nsys kernels and NVTX ranges, GPU metrics,
    and per-SM lanes of tile spans (``spans`` with shaping.span_categories columns) or, when too
    many, the busy-fraction heat map ``heat`` = (edges, lanes, fraction); ``highlight``: the
    selected tile's spans (span_categories columns), shaded and outlined."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.04, row_heights=[0.12, 0.22, 0.66],
                        subplot_titles=("kernels and NVTX ranges (nsys)", "GPU metrics (nsys, %)",
                                        "tile spans per SM (probes; MMA role above, epilogue below)" if heat is None
                                        else f"{heat_label}: fraction of each time bin per SM (probes)"))
    if len(kernels):
        fig.add_trace(_bars(kernels, ["kernels"] * len(kernels), "kernel", COLORS["kernel"], origin_ns,
                            kernels.get("short_name", kernels.get("name"))), row=1, col=1)
    if len(nvtx):
        fig.add_trace(_bars(nvtx, ["NVTX"] * len(nvtx), "NVTX", COLORS["NVTX"], origin_ns, nvtx_labels(nvtx)), row=1, col=1)
    for name, g in metrics.groupby("metric", sort=True):
        fig.add_trace(go.Scatter(x=(g["t_ns"] - origin_ns) / 1e3, y=g["value"], mode="lines", name=name), row=2, col=1)
    if heat is not None:
        edges, lanes, frac = heat
        centers = (edges[:-1] + edges[1:]) / 2
        fig.add_trace(go.Heatmap(x=(centers - origin_ns) / 1e3, y=lanes, z=frac, colorscale="YlOrRd", zmin=0, zmax=1,
                                 colorbar=dict(title="busy", len=0.6, y=0.3), name=heat_label), row=3, col=1)
    elif spans is not None and len(spans):
        for cat, g in spans.groupby("category", sort=False):
            text = ("CTA " + g["cta"].astype(str) + " tile " + g["tile"].astype(str) + " · "
                    + (g["duration_ns"] / 1e3).round(2).astype(str) + " µs")
            fig.add_trace(_bars(g, g["lane"], cat, COLORS.get(cat, "#777777"), origin_ns, text, width=0.38), row=3, col=1)
    if highlight is not None and len(highlight):
        for _, h in highlight.iterrows():  # the one selected tile's few spans: shaded, and outlined in their lane
            x0, x1 = (h["start_ns"] - origin_ns) / 1e3, (h["end_ns"] - origin_ns) / 1e3
            fig.add_vrect(x0=x0, x1=x1, fillcolor="#c4161c", opacity=0.10, line_width=0, row="all", col=1)
            fig.add_shape(type="rect", x0=x0, x1=x1, y0=h["lane"] - 0.3, y1=h["lane"] + 0.3,
                          line=dict(color="black", width=2), row=3, col=1)
    fig.update_layout(barmode="overlay", height=760, **LAYOUT)
    fig.update_xaxes(range=[(start_ns - origin_ns) / 1e3, (end_ns - origin_ns) / 1e3])
    fig.update_xaxes(title_text="time (µs from the window's kernel start)", row=3, col=1)
    fig.update_yaxes(title_text="SM", row=3, col=1)
    return fig


def stall_scatter(sample: pd.DataFrame, color_by: str) -> go.Figure:
    """Predicted vs measured stall per tile (µs) with the diagonal y = x."""
    fig = go.Figure()
    for name, g in sample.groupby(color_by, sort=True):
        fig.add_trace(go.Scattergl(x=g["predicted_stall_ns"] / 1e3, y=g["measured_stall_ns"] / 1e3, mode="markers",
                                   name=str(name), marker=dict(size=4, opacity=0.6)))
    hi = float(np.nanmax(sample[["predicted_stall_ns", "measured_stall_ns"]].to_numpy()) / 1e3) if len(sample) else 1.0
    fig.add_trace(go.Scatter(x=[0, hi], y=[0, hi], mode="lines", name="measured = predicted", line=dict(color="black", dash="dash")))
    fig.update_layout(xaxis_title="predicted stall Δt = [T_lead + T_RS − T_cover]₊ (µs)", yaxis_title="measured stall: slot wait − floor (µs)",
                      height=480, **LAYOUT)
    return fig


def quantile_boxes(q: pd.DataFrame, by: str, value_label: str) -> go.Figure:
    """Box plot from precomputed quantiles (shaping.group_quantiles), whiskers at min / max."""
    fig = go.Figure(go.Box(x=q[by].astype(str), q1=q["p25"] / 1e3, median=q["median"] / 1e3, q3=q["p75"] / 1e3,
                           lowerfence=q["min"] / 1e3, upperfence=q["max"] / 1e3, mean=q["mean"] / 1e3,
                           name=value_label, boxpoints=False))
    fig.update_layout(xaxis_title=by, yaxis_title=f"{value_label} (µs)", height=380, **LAYOUT)
    return fig


def bursts_figure(seq: pd.DataFrame, onset: int | None) -> go.Figure:
    """V_n, G_n, ρ_n (with ρ = 1) and the guard q_n + b_n^iso against Q over the burst sequence,
    the guard's onset marked."""
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=("burst volume V_n (MiB)", "gap G_n (µs)", "offered pressure ρ_n",
                                        "capacity guard: q_n + b_n^iso vs Q (MiB)"))
    x = seq["burst"]
    fig.add_trace(go.Scattergl(x=x, y=seq["volume_mib"], mode="markers", name="V_n", marker=dict(size=4)), row=1, col=1)
    fig.add_trace(go.Scattergl(x=x, y=seq["gap_us"], mode="markers", name="G_n", marker=dict(size=4)), row=2, col=1)
    fig.add_trace(go.Scattergl(x=x, y=seq["rho"], mode="markers", name="ρ_n", marker=dict(size=4)), row=3, col=1)
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray", row=3, col=1)
    fig.add_trace(go.Scattergl(x=x, y=seq["guard_lhs_mib"], mode="lines", name="q_n + b_n^iso"), row=4, col=1)
    fig.add_trace(go.Scattergl(x=x, y=seq["q_mib"], mode="lines", name="q_n", line=dict(dash="dot")), row=4, col=1)
    if seq["capacity_mib"].notna().any():
        fig.add_trace(go.Scattergl(x=x, y=seq["capacity_mib"], mode="lines", name="Q(K_n)", line=dict(color="black", dash="dash")), row=4, col=1)
    if onset is not None:
        fig.add_vline(x=onset, line_color="#c4161c", line_width=2, row="all", col=1)
        fig.add_annotation(x=onset, y=1.0, yref="paper", text=f"guard onset: burst {onset}", showarrow=False,
                           font=dict(color="#c4161c"), xanchor="left")
    fig.update_yaxes(type="log", row=3, col=1)
    fig.update_xaxes(title_text="burst n", row=4, col=1)
    fig.update_layout(height=820, **LAYOUT)
    return fig


def calibration_vs_gap(pred: pd.DataFrame, k: int, measured: str, eq1: str, rec: str | None, title: str, y_label: str) -> go.Figure:
    """Measured (markers), Eq. 1 (dashed) and recurrence (line) against the gap, per burst size B, for one K."""
    fig = go.Figure()
    g = pred[pred["K"] == k]
    palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2"]
    for j, (b, gb) in enumerate(g.groupby("B", sort=True)):
        gb = gb.sort_values("gap_ns")
        col = palette[j % len(palette)]
        x = gb["gap_ns"] / 1e3
        fig.add_trace(go.Scatter(x=x, y=gb[measured] / 1e3, mode="markers", name=f"B={b // 1024} KiB measured", marker=dict(color=col, size=8)))
        fig.add_trace(go.Scatter(x=x, y=gb[eq1] / 1e3, mode="lines", name=f"B={b // 1024} KiB Eq. 1", line=dict(color=col, dash="dash")))
        if rec and rec in gb:
            fig.add_trace(go.Scatter(x=x, y=gb[rec] / 1e3, mode="lines", name=f"B={b // 1024} KiB recurrence", line=dict(color=col)))
    fig.update_layout(title=title, xaxis_title="gap G (µs)", yaxis_title=y_label, yaxis_type="log", height=420, **SIDE_LEGEND)
    return fig


def isolated_issue(iso: pd.DataFrame, floor_ns: np.ndarray, law_ns: np.ndarray | None, k: int) -> go.Figure:
    """Isolated bursts: issue time (median, p90) vs volume with the recovered floor T_iss^0 and the
    capacity law max(T_iss^0, (V − Q)/R)."""
    v = iso["V"] / float(1 << 20)
    fig = go.Figure([
        go.Scatter(x=v, y=iso["tiss_med_ns"] / 1e3, mode="markers", name="median", marker=dict(size=8)),
        go.Scatter(x=v, y=iso["tiss_p90_ns"] / 1e3, mode="markers", name="p90", marker=dict(size=8, symbol="diamond")),
        go.Scatter(x=v, y=floor_ns / 1e3, mode="lines", name="T_iss^0", line=dict(dash="dash")),
    ])
    if law_ns is not None:
        fig.add_trace(go.Scatter(x=v, y=law_ns / 1e3, mode="lines", name="capacity law T_iss^iso (docs/model.md §3)"))
    fig.update_layout(title=f"isolated burst issue vs volume, K = {k}", xaxis_title="volume V (MiB)", yaxis_title="issue time (µs)",
                      xaxis_type="log", yaxis_type="log", height=420, **SIDE_LEGEND)
    return fig


def residuals(pred: pd.DataFrame, columns: dict[str, str]) -> go.Figure:
    """Per-point % error of the period predictions against the gap (one trace per model)."""
    fig = go.Figure()
    for label, col in columns.items():
        if col in pred:
            fig.add_trace(go.Scatter(x=pred["gap_ns"] / 1e3, y=pred[col], mode="markers", name=label,
                                     hovertext="K=" + pred["K"].astype(str) + " B=" + pred["B"].astype(str)))
    fig.update_layout(title="period error |predicted − measured| / measured", xaxis_title="gap G (µs)", yaxis_title="error (%)",
                      height=380, **SIDE_LEGEND)
    return fig


def whatif_curve(x_us: np.ndarray, stall_wave_us: np.ndarray, stall_int_us: np.ndarray, at_us: float, x_label: str) -> go.Figure:
    """Predicted stall per schedule against one swept input, the current setting marked."""
    fig = go.Figure([go.Scatter(x=x_us, y=stall_wave_us, mode="lines", name="expert-wave"),
                     go.Scatter(x=x_us, y=stall_int_us, mode="lines", name="interleaved")])
    fig.add_vline(x=at_us, line_dash="dot", line_color="gray")
    fig.update_layout(xaxis_title=x_label, yaxis_title="predicted stall Δt (µs)", height=360, **LAYOUT)
    return fig
