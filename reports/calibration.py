"""Markdown reports (calibration; more come with the report command)."""

from __future__ import annotations

import pandas as pd


def _fmt(x, nd=1):
    return "" if x is None or (isinstance(x, float) and x != x) else f"{x:.{nd}f}"


def _errs(e: dict | None) -> str:
    if not e:
        return "n/a"
    return f"median {_fmt(e['period_err_median_pct'], 2)} %, mean {_fmt(e['period_err_mean_pct'], 2)} %"


def _iso_errs(e: dict | None) -> list[str]:
    if not e:
        return []
    out = []
    for key, name in (("vs_median", "median"), ("vs_p90", "p90")):
        x = e[key]
        part = lambda y: "n/a" if y is None else f"median {_fmt(y['issue_err_median_pct'], 2)} %, mean {_fmt(y['issue_err_mean_pct'], 2)} %"  # noqa: E731
        out.append(f"- isolated law max(T_iss^0, (V − Q)/R) vs measured {name} issue time: {part(x)} "
                   f"(within Q: {part(x['within_q'])}; beyond Q: {part(x['beyond_q'])})")
    out.append(f"  ({e['points']} isolated launches, {e['points_beyond_q']} with V − R·T_iss^0 > Q; within Q the law is T_iss^0, "
               "taken from the fitting run's medians)")
    return out


def _capacity_lines(doc: dict) -> list[str]:
    if doc.get("capacity_estimates"):
        lines = ["- Q(K), estimate [bootstrap 5–95 % interval] (evidence):"]
        for k, c in doc["capacity_estimates"].items():
            iv = c.get("interval_bytes")
            q = "n/a" if c["q_bytes"] is None else f"{c['q_bytes'] / 2**20:.2f} MiB"
            iv_s = f" [{iv[0] / 2**20:.2f}, {iv[1] / 2**20:.2f}]" if iv else ""
            knee = c.get("knee")
            knee_s = ""
            if knee and knee["v_hi_bytes"] is not None:
                knee_s = f"; isolated knee ({knee['detector']}) between V = {knee['v_lo_bytes'] / 2**20:.2f} and {knee['v_hi_bytes'] / 2**20:.2f} MiB"
            elif knee:
                knee_s = f"; isolated issue never left the floor up to V = {knee['v_lo_bytes'] / 2**20:.2f} MiB"
            lines.append(f"  - K={k}: {q}{iv_s} ({c['source']}{knee_s})")
        return lines
    caps = doc.get("capacity_by_producers_bytes") or {}
    return ["- Q(K) = " + (", ".join(f"K={k}: {v / 2**20:.2f} MiB" for k, v in caps.items()) or f"n/a ({doc['capacity_reason']})")
            + (f" ({doc['capacity_source']})" if doc.get("capacity_source") else "")]


def calibration_report(doc: dict, points: pd.DataFrame) -> str:
    """Measured vs predicted tables for a calibration (period vs gap, isolated issue vs volume).

    Reads version-2 documents and the version-1 ones shipped before them.
    """
    from xstage_trace.analysis.calibration_fit import predict, predict_isolated
    from xstage_trace.calibration_io import EQ1_LINE, RECURRENCE_LINE, period_errors_of

    lines = [f"# Calibration: {doc['platform']} {doc['store_path']}", "",
             "Timing scope: sender-visible (probe clock64 → ns per SM). Medians over producers × bursts.", "",
             f"- R = {_fmt(doc['rate_gbps'])} ± {_fmt(doc['rate_uncertainty_gbps'])} GB/s pooled ({doc['rate_points']} drain-limited zero-gap launches)"]
    measured = doc.get("rate_measured_by_producers") or {}
    if measured and int(doc.get("calibration_version", 1)) >= 2:
        lines.append("- R(K) used in prediction: " + ", ".join(
            f"K={k}: {_fmt(doc['rate_by_producers_gbps'][k])} GB/s" + (f" (own median {_fmt(m['rate_gbps'])} ± {_fmt(m['uncertainty_gbps'])}, differs from the pooled R)"
                                                                      if m["differs"] else f" (pooled; own median {_fmt(m['rate_gbps'])} ± {_fmt(m['uncertainty_gbps'])})")
            for k, m in measured.items()))
    lines.append(f"- loop overhead o = {_fmt(doc['loop_overhead_ns'], 0)} ns")
    lines += _capacity_lines(doc)
    pe = period_errors_of(doc)
    lines += [f"- period error, {RECURRENCE_LINE} (§4 with Q and o): {_errs(pe.get('recurrence'))}",
              f"- period error, {EQ1_LINE} (max(T_iss^0 + G + o, V/R), no capacity): {_errs(pe.get('eq1_loop_overhead'))}"]
    lines += _iso_errs(doc.get("isolated_law"))
    v = doc.get("validation")
    if v:
        vs = v["period_errors_shared_configurations"]
        lines += ["", f"## Cross-run validation: this fit predicting {v['input']['name']} ({v['store_path']}), no refit", "",
                  f"- all {v['periodic_points']} periodic launches: {RECURRENCE_LINE} {_errs(v['period_errors'].get('recurrence'))}; "
                  f"{EQ1_LINE} {_errs(v['period_errors'].get('eq1_loop_overhead'))}",
                  f"- the {v['shared_points']} launches whose (K, B, G) this fit also measured: {RECURRENCE_LINE} {_errs(vs.get('recurrence'))}; "
                  f"{EQ1_LINE} {_errs(vs.get('eq1_loop_overhead'))}"]
        lines += _iso_errs(v.get("isolated_law"))
    from xstage_trace.calibration_io import load_platform_from_doc

    model = load_platform_from_doc(doc)
    pts = points[points["dest"] == doc["store_path"]]
    pred = predict(pts, model)
    lines += ["", "## Period vs gap (periodic)", "",
              f"| K | B | G ns | period ns | {EQ1_LINE} ns | {RECURRENCE_LINE} ns | issue ns | issue, {EQ1_LINE} ns |", "|---|---|---|---|---|---|---|---|"]
    for _, r in pred.iterrows():  # one row per launch, for the report
        lines.append(f"| {r.K} | {r.B} | {r.gap_ns:.0f} | {r.period_med_ns:.0f} | {r.pred_period_ss_ns:.0f} | {_fmt(r.get('pred_period_rec_ns'), 0)} | {r.tiss_med_ns:.0f} | {r.pred_issue_ss_ns:.0f} |")
    iso = pts[pts["mode"] == "isolated"]
    if len(iso):
        law = predict_isolated(pts, model)
        lines += ["", "## Isolated issue vs volume", "", "| K | V bytes | issue median ns | issue p90 ns | T_iss^0 ns | law max(T_iss^0, (V − Q)/R) ns |", "|---|---|---|---|---|---|"]
        t0 = model.floor_ns(iso["K"].to_numpy(), iso["B"].to_numpy())
        pred_law = law["pred_issue_iso_ns"].reindex(iso.index) if len(law) else pd.Series(index=iso.index, dtype=float)
        for (_, r), f, q in zip(iso.iterrows(), t0, pred_law):
            lines.append(f"| {r.K} | {r.V} | {r.tiss_med_ns:.0f} | {r.tiss_p90_ns:.0f} | {f:.0f} | {_fmt(q, 0)} |")
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
