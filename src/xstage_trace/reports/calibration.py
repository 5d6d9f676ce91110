"""The calibration report: measured vs predicted tables and figures for one fitted store path."""

from __future__ import annotations

from pathlib import Path

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


def _difference_lines(d: dict | None) -> list[str]:
    """The two runs' raw measurements at the (K, B, G) both ran (calibration_crossrun.compare_runs)."""
    if not d or not d.get("shared_points"):
        return []
    p = d["period_difference_pct"]
    out = [f"- measured difference at the {d['shared_points']} shared (K, B, G), no model: period median {_fmt(p['median'], 2)} %, "
           f"mean {_fmt(p['mean'], 2)} % (what a perfect model of this run still misses on the other)"]
    if d.get("floor_offset_ns"):
        f = d["floor_offset_ns"]
        out.append(f"- recovered launches: T_iss^0 + o of the other run minus this one's: median {_fmt(f['median'], 1)} ns "
                   f"(from {_fmt(f['min'], 1)} to {_fmt(f['max'], 1)}, {f['points']} launches)")
    if d.get("drain_rate_ratio"):
        r = d["drain_rate_ratio"]
        out.append(f"- drain-limited in both: R(K, B) of this run against the other's launches |R_other / R_this − 1|: median "
                   f"{_fmt(r['period_err_bound_median_pct'], 2)} %, mean {_fmt(r['period_err_bound_mean_pct'], 2)} % ({r['launches']} launches); per (K, B) ratio: "
                   + ", ".join(f"{kb}: {_fmt(x['ratio'], 3)}" for kb, x in d["rate_ratio_by_configuration"].items()))
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
    from xstage_trace.collectors.calibration_io import EQ1_LINE, RECURRENCE_LINE, period_errors_of, store_of_document

    lines = [f"# Calibration: {doc['platform']} {doc['store_path']}, store instruction {store_of_document(doc)}", "",
             "Timing scope: sender-visible (probe clock64 → ns per SM). Medians over producers × bursts.", "",
             f"- R = {_fmt(doc['rate_gbps'])} ± {_fmt(doc['rate_uncertainty_gbps'])} GB/s pooled ({doc['rate_points']} drain-limited launches)"]
    measured = doc.get("rate_measured_by_producers") or {}
    if measured and int(doc.get("calibration_version", 1)) >= 2:
        lines.append("- R(K) used in prediction: " + ", ".join(
            f"K={k}: {_fmt(doc['rate_by_producers_gbps'][k])} GB/s" + (f" (own median {_fmt(m['rate_gbps'])} ± {_fmt(m['uncertainty_gbps'])}, differs from the pooled R)"
                                                                      if m["differs"] else f" (pooled; own median {_fmt(m['rate_gbps'])} ± {_fmt(m['uncertainty_gbps'])})")
            for k, m in measured.items()))
    conf = doc.get("rate_measured_by_configuration") or {}
    if conf:
        lines.append("- R(K, B) used in prediction (median ± half IQR over the drain-limited launches of each configuration): "
                     + ", ".join(f"{kb}: {_fmt(m['rate_gbps'])} ± {_fmt(m['uncertainty_gbps'])} GB/s ({m['points']})" for kb, m in conf.items()))
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
        lines += _difference_lines(v.get("measured_difference"))
    from xstage_trace.analysis.calibration_model import load_platform_from_doc, points_of_document

    model = load_platform_from_doc(doc)
    pts = points_of_document(doc, points)
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


def calibration_figures(doc: dict, points: pd.DataFrame) -> dict:
    """The calibration's Figure 2/3 views (matplotlib, by file stem): period and issue time vs gap
    (measured, Eq. 1, recurrence) per K, and isolated issue time vs volume (median, p90, recovered
    floor, max(T0, (V − Q)/R))."""
    import numpy as np

    from xstage_trace.analysis.calibration_fit import predict
    from xstage_trace.analysis.calibration_model import load_platform_from_doc, points_of_document
    from xstage_trace.collectors.calibration_io import calibration_name
    from xstage_trace.reports.figures import new_figure

    model = load_platform_from_doc(doc)
    pts = points_of_document(doc, points)
    name = calibration_name(doc)
    pred = predict(pts, model)
    figs: dict = {}
    for k, g in pred.groupby("K"):  # one chart per producer count
        pf, pax = new_figure(f"{name}: period vs gap, K = {k}", "gap G (ns)", "period (ns)", log_y=True)
        ifig, iax = new_figure(f"{name}: issue time vs gap, K = {k}", "gap G (ns)", "issue time (ns)", log_y=True)
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
        figs[f"{name}_period_vs_gap_K{k}"] = pf
        figs[f"{name}_issue_vs_gap_K{k}"] = ifig
    iso = pts[pts["mode"] == "isolated"]
    for k, g in iso.groupby("K"):
        g = g.sort_values("V")
        v = g["V"].to_numpy(dtype=float)
        t0 = model.floor_ns(g["K"].to_numpy(), g["B"].to_numpy())
        fig, ax = new_figure(f"{name}: isolated burst issue vs volume, K = {k}", "volume V (bytes)", "issue time (ns)", log_x=True, log_y=True)
        ax.plot(v, g["tiss_med_ns"], "o", ms=3, label="median")
        ax.plot(v, g["tiss_p90_ns"], "s", ms=3, label="p90")
        ax.plot(v, t0, "--", label="T_iss^0")
        q = model.capacity([k])
        if q is not None:
            ax.plot(v, np.maximum(t0, (v - q[0]) / model.rate_gbps), "-", label="max(T0, (V-Q)/R)")
        ax.legend(fontsize=8)
        figs[f"{name}_isolated_issue_K{k}"] = fig
    return figs


def write_calibration_report(folder: Path, doc: dict, points: pd.DataFrame) -> None:
    """report_NAME.md and its figures/ (SVG and PNG) for one fitted store path and store instruction
    (NAME: calibration_io.calibration_name; docs/model.md §3)."""
    from xstage_trace.base.atomic import write_text_atomic
    from xstage_trace.collectors.calibration_io import calibration_name
    from xstage_trace.reports.figures import save_figure

    figs = calibration_figures(doc, points)
    for stem, fig in figs.items():
        save_figure(fig, Path(folder) / "figures", stem)
    text = calibration_report(doc, points)
    text += "\n## Figures\n\n" + "\n".join(f"![{n}](figures/{n}.svg)" for n in sorted(figs)) + "\n"
    write_text_atomic(Path(folder) / f"report_{calibration_name(doc)}.md", text)
