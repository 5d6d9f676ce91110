"""The calibration report: measured vs predicted tables and figures for one fitted store path."""

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


def calibration_figures(doc: dict, points: pd.DataFrame) -> dict:
    """The calibration's Figure 2/3 views (matplotlib, by file stem): period and issue time vs gap
    (measured, Eq. 1, recurrence) per K, and isolated issue time vs volume (median, p90, recovered
    floor, max(T0, (V − Q)/R))."""
    import numpy as np

    from xstage_trace.analysis.calibration_fit import predict
    from xstage_trace.calibration_io import load_platform_from_doc
    from xstage_trace.reports.figures import new_figure

    model = load_platform_from_doc(doc)
    pts = points[points["dest"] == doc["store_path"]]
    pred = predict(pts, model)
    figs: dict = {}
    for k, g in pred.groupby("K"):  # one chart per producer count
        pf, pax = new_figure(f"{doc['store_path']}: period vs gap, K = {k}", "gap G (ns)", "period (ns)", log_y=True)
        ifig, iax = new_figure(f"{doc['store_path']}: issue time vs gap, K = {k}", "gap G (ns)", "issue time (ns)", log_y=True)
        for j, (b, gb) in enumerate(g.groupby("B")):  # one colour per burst size: dots measured, dashes Eq. 1, line recurrence
            gb = gb.sort_values("gap_ns")
            x, col, kib = gb["gap_ns"], f"C{j % 10}", f"B={b // 1024} KiB"
            pax.plot(x, gb["period_med_ns"], "o", ms=3, color=col, label=f"{kib} measured")
            pax.plot(x, gb["pred_period_ss_ns"], "--", color=col, label=f"{kib} Eq. 1")
            iax.plot(x, gb["tiss_med_ns"], "o", ms=3, color=col, label=f"{kib} measured")
            iax.plot(x, gb["pred_issue_ss_ns"], "--", color=col, label=f"{kib} Eq. 1")
            if "pred_period_rec_ns" in gb:
                pax.plot(x, gb["pred_period_rec_ns"], "-", color=col, label=f"{kib} recurrence")
        for ax in (pax, iax):
            ax.legend(fontsize=6, ncol=2)
        figs[f"{doc['store_path']}_period_vs_gap_K{k}"] = pf
        figs[f"{doc['store_path']}_issue_vs_gap_K{k}"] = ifig
    iso = pts[pts["mode"] == "isolated"]
    for k, g in iso.groupby("K"):
        g = g.sort_values("V")
        v = g["V"].to_numpy(dtype=float)
        t0 = model.floor_ns(g["K"].to_numpy(), g["B"].to_numpy())
        fig, ax = new_figure(f"{doc['store_path']}: isolated burst issue vs volume, K = {k}", "volume V (bytes)", "issue time (ns)", log_x=True, log_y=True)
        ax.plot(v, g["tiss_med_ns"], "o", ms=3, label="median")
        ax.plot(v, g["tiss_p90_ns"], "s", ms=3, label="p90")
        ax.plot(v, t0, "--", label="T_iss^0")
        q = model.capacity([k])
        if q is not None:
            ax.plot(v, np.maximum(t0, (v - q[0]) / model.rate_gbps), "-", label="max(T0, (V-Q)/R)")
        ax.legend(fontsize=8)
        figs[f"{doc['store_path']}_isolated_issue_K{k}"] = fig
    return figs
