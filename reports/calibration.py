"""Markdown reports (calibration; more come with the report command)."""

from __future__ import annotations

import pandas as pd


def _fmt(x, nd=1):
    return "" if x is None or (isinstance(x, float) and x != x) else f"{x:.{nd}f}"


def calibration_report(doc: dict, points: pd.DataFrame) -> str:
    """Measured vs predicted tables for a calibration (period vs gap, isolated issue vs volume)."""
    lines = [f"# Calibration: {doc['platform']} {doc['store_path']}", "",
             "Timing scope: sender-visible (probe clock64 → ns per SM). Medians over producers × bursts.", "",
             f"- R = {_fmt(doc['rate_gbps'])} ± {_fmt(doc['rate_uncertainty_gbps'])} GB/s ({doc['rate_points']} drain-limited zero-gap launches)",
             f"- loop overhead o = {_fmt(doc['loop_overhead_ns'], 0)} ns",
             "- Q(K) = " + (", ".join(f"K={k}: {v / 2**20:.2f} MiB" for k, v in doc["capacity_by_producers_bytes"].items()) or f"n/a ({doc['capacity_reason']})")
             + (f" ({doc['capacity_source']})" if doc.get("capacity_source") else ""),
             f"- period error, recurrence: median {_fmt(doc['period_err_median_pct'], 2)} %, mean {_fmt(doc['period_err_mean_pct'], 2)} %"]
    ss = doc.get("errors_steady_state") or {}
    if ss:
        lines.append(f"- period error, Eq. 1 alone: median {_fmt(ss['period_err_median_pct'], 2)} %, mean {_fmt(ss['period_err_mean_pct'], 2)} %")
    from xstage_trace.analysis.calibration_fit import predict
    from xstage_trace.calibration_io import load_platform_from_doc

    model = load_platform_from_doc(doc)
    pts = points[points["dest"] == doc["store_path"]]
    pred = predict(pts, model)
    lines += ["", "## Period vs gap (periodic)", "", "| K | B | G ns | period ns | Eq. 1 ns | recurrence ns | issue ns | issue Eq. 1 ns |", "|---|---|---|---|---|---|---|---|"]
    for _, r in pred.iterrows():  # one row per launch, for the report
        lines.append(f"| {r.K} | {r.B} | {r.gap_ns:.0f} | {r.period_med_ns:.0f} | {r.pred_period_ss_ns:.0f} | {_fmt(r.get('pred_period_rec_ns'), 0)} | {r.tiss_med_ns:.0f} | {r.pred_issue_ss_ns:.0f} |")
    iso = pts[pts["mode"] == "isolated"]
    if len(iso):
        lines += ["", "## Isolated issue vs volume", "", "| K | V bytes | issue median ns | issue p90 ns | T_iss^0 ns |", "|---|---|---|---|---|"]
        t0 = model.floor_ns(iso["K"].to_numpy(), iso["B"].to_numpy())
        for (_, r), f in zip(iso.iterrows(), t0):
            lines.append(f"| {r.K} | {r.V} | {r.tiss_med_ns:.0f} | {r.tiss_p90_ns:.0f} | {f:.0f} |")
    return "\n".join(lines) + "\n"


def calibration_figures(doc: dict, points: pd.DataFrame) -> dict[str, str]:
    """The calibration's Figure 2/3 views as SVG: period and issue time vs gap (measured, Eq. 1,
    recurrence) per K, and isolated issue time vs volume (median, p90, recovered floor, (V − Q)/R)."""
    import numpy as np

    from xstage_trace.analysis.calibration_fit import predict
    from xstage_trace.calibration_io import load_platform_from_doc
    from xstage_trace.reports.svgplot import PALETTE, Chart, Series, render

    model = load_platform_from_doc(doc)
    pts = points[points["dest"] == doc["store_path"]]
    pred = predict(pts, model)
    figs: dict[str, str] = {}
    for k, g in pred.groupby("K"):  # one chart per producer count
        period = Chart(f"{doc['store_path']}: period vs gap, K = {k}", "gap G (ns)", "period (ns)", log_y=True)
        issue = Chart(f"{doc['store_path']}: issue time vs gap, K = {k}", "gap G (ns)", "issue time (ns)", log_y=True)
        for j, (b, gb) in enumerate(g.groupby("B")):  # one color per burst size: dots measured, dashes Eq. 1, line recurrence
            gb = gb.sort_values("gap_ns")
            x, col = gb["gap_ns"].tolist(), PALETTE[j % len(PALETTE)]
            period.series += [Series(f"B={b // 1024} KiB measured", x, gb["period_med_ns"].tolist(), line=False, markers=True, color=col),
                              Series(f"B={b // 1024} KiB Eq. 1", x, gb["pred_period_ss_ns"].tolist(), dashed=True, color=col)]
            issue.series += [Series(f"B={b // 1024} KiB measured", x, gb["tiss_med_ns"].tolist(), line=False, markers=True, color=col),
                             Series(f"B={b // 1024} KiB Eq. 1", x, gb["pred_issue_ss_ns"].tolist(), dashed=True, color=col)]
            if "pred_period_rec_ns" in gb:
                period.series.append(Series(f"B={b // 1024} KiB recurrence", x, gb["pred_period_rec_ns"].tolist(), color=col))
        figs[f"{doc['store_path']}_period_vs_gap_K{k}.svg"] = render(period)
        figs[f"{doc['store_path']}_issue_vs_gap_K{k}.svg"] = render(issue)
    iso = pts[pts["mode"] == "isolated"]
    for k, g in iso.groupby("K"):
        g = g.sort_values("V")
        v = g["V"].to_numpy(dtype=float)
        t0 = model.floor_ns(g["K"].to_numpy(), g["B"].to_numpy())
        c = Chart(f"{doc['store_path']}: isolated burst issue vs volume, K = {k}", "volume V (bytes)", "issue time (ns)", log_x=True, log_y=True)
        c.series += [Series("median", v.tolist(), g["tiss_med_ns"].tolist(), line=False, markers=True),
                     Series("p90", v.tolist(), g["tiss_p90_ns"].tolist(), line=False, markers=True),
                     Series("T_iss^0", v.tolist(), t0.tolist(), dashed=True)]
        q = model.capacity([k])
        if q is not None:
            law = np.maximum(t0, (v - q[0]) / model.rate_gbps)
            c.series.append(Series("max(T0, (V-Q)/R)", v.tolist(), law.tolist()))
        figs[f"{doc['store_path']}_isolated_issue_K{k}.svg"] = render(c)
    return figs
