"""What a run report says, independent of the output format: a list of sections (title, timing
scope, text, table, figures) built from the run API only. reports/markdown.py and reports/html.py
render the same sections."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from xstage_trace.reports.configs import config_names, run_trials, slowest_rank_trials, tile_configs

WORST_TILES = 40


@dataclass
class Section:
    """One report section. ``scope`` names the timing scope of every number in it (docs/model.md §10)."""

    title: str
    scope: str = ""
    text: list[str] = field(default_factory=list)
    table: pd.DataFrame | None = None
    details: bool = False  # long table: folded (<details>) in Markdown and HTML
    figures: list[str] = field(default_factory=list)  # figure stems


SCOPE_PROBE = "per-tile spans and stalls: probe clock64 converted to ns per SM (µs)"
SCOPE_KERNEL = "kernel time: nsys kernel rows (ms), per trial the slowest rank, median over trials, warm-ups excluded"
SCOPE_SENDER = "sender-visible: the issuing role's probe clock, converted per SM (ns)"


def _bold_name(sentence: str) -> str:
    """``- **host S1 … wave**: stall-bound …``: a verdict sentence as a Markdown bullet, its configuration in bold."""
    name, _, rest = sentence.partition(": ")
    return f"- **{name}**: {rest}"


def run_noise_ns(tiles: pd.DataFrame) -> float | None:
    """The backpressure threshold the run's tile analysis used (tiles.noise_ns), if any."""
    if tiles.empty or "noise_ns" not in tiles:
        return None
    return float(tiles["noise_ns"].median())


def kernel_time_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Median, p10, p90 and IQR/median of the nsys kernel time per configuration (ms) over its trials
    (``slowest_rank_trials``: per trial the slowest rank)."""
    g = trials.groupby(["dest", "shape", "variant", "schedule", "kernel"], sort=True, dropna=False)["kernel_ms"]
    return g.agg(trials="size", median_ms="median", p10_ms=lambda x: x.quantile(0.1), p90_ms=lambda x: x.quantile(0.9),
                 iqr_pct=lambda x: 100 * (x.quantile(0.75) - x.quantile(0.25)) / x.median()).reset_index()


TABLE3_SHOWN = ("dest", "shape", "variant", "schedule", "tiles", "stalled_tiles", "store_span_ns", "cover_ns", "slot_pred_ns", "slot_meas_ns",
                "compute_stall_ns", "stall_ns", "forward_stall_ns", "kernel_ns")  # the rest: Run.table3()


def table3_display(table3: pd.DataFrame) -> pd.DataFrame:
    """Table 3's TABLE3_SHOWN columns with headers that carry the schema's label and the unit (times in
    µs, kernel time in ms)."""
    from xstage_trace.base.schema import TABLE3

    labels = {f.name: (f.metadata or {}).get(b"label", f.name.encode()).decode() for f in TABLE3}
    out = pd.DataFrame(index=table3.index)
    for c in [c for c in TABLE3_SHOWN if c in table3.columns]:
        label = labels.get(c, c)
        if c == "kernel_ns":
            out[f"{label} (ms, nsys)"] = table3[c] / 1e6
        elif c.endswith("_ns"):
            out[f"{label} (µs, probe)"] = table3[c] / 1e3
        else:
            out[label] = table3[c]
    return out


def verdict_display(v: pd.DataFrame) -> pd.DataFrame:
    """The verdict table (verdict_text.in_display_units) with its µs / ms columns only, labelled."""
    keep = [c for c in v.columns if not c.endswith("_ns")]
    return v[keep].rename(columns={c: c[:-3].replace("_", " ") + " (µs, probe)" for c in keep if c.endswith("_us")} | {"kernel_ms": "kernel (ms, nsys)"})


def burst_audit_table(bursts: pd.DataFrame, labels: pd.Series) -> pd.DataFrame:
    """docs/model.md §4 audit per burst sequence (one dump): bursts, volume, median issue time, max ρ,
    max backlog q, capacity-guard failures and the first failing burst."""
    if bursts.empty:
        return pd.DataFrame()
    b = bursts.copy()
    b["guard_fail"] = b["guard_ok"].astype("boolean").eq(False)
    g = b.groupby(["rank", "dump"], sort=True)
    t = g.agg(bursts=("burst", "size"), volume_MiB=("volume_bytes", lambda v: v.sum() / 2**20), issue_med_ns=("issue_ns", "median"),
              rho_max=("rho", "max"), q_max_MiB=("q_bytes", lambda v: v.max() / 2**20), guard_failures=("guard_fail", "sum")).reset_index()
    onset = b[b["guard_fail"]].groupby(["rank", "dump"])["burst"].min()
    t["onset_burst"] = t.set_index(["rank", "dump"]).index.map(onset)
    t.insert(1, "config", t["dump"].map(labels).fillna(""))
    if t["config"].duplicated().any() or (t["config"] == "").any():  # labels without dest/shape/schedule: name the dump
        t["config"] = t["dump"].str.replace(r"\.xsp.*$", "", regex=True)
    return t.drop(columns=["dump"])


def model_residuals(verdicts: pd.DataFrame, tiles: pd.DataFrame) -> pd.DataFrame:
    """Measured − predicted stall per configuration × schedule: the median difference and the
    p90 of |measured − predicted| over Linear-2 tiles (µs, probe clock per SM)."""
    t = tile_configs(tiles)
    t = t[t["tile_kind"] == "linear2"].dropna(subset=["measured_stall_ns", "predicted_stall_ns"])
    t = t.assign(res_us=(t["measured_stall_ns"] - t["predicted_stall_ns"]) / 1e3)
    g = t.groupby(["dest", "shape", "schedule"], sort=True)["res_us"]
    return g.agg(tiles="size", residual_median_us="median", abs_residual_p90_us=lambda x: x.abs().quantile(0.9)).reset_index()


def calibration_residuals(points: pd.DataFrame) -> pd.DataFrame:
    """For a calibration run: the model fitted on its points (docs/model.md §3) and the period residual of
    its periodic points per store path (measured vs recurrence prediction, %); a store path whose points
    cannot be fitted has its reason in ``problem`` and no numbers."""
    from xstage_trace.analysis.calibration_fit import UnrecoveredSweep, fit_calibration, predict

    rows = []
    for dest, p in points.groupby("dest", sort=True):  # one fit per store path
        try:
            fit = fit_calibration(p, store_path=str(dest))
        except UnrecoveredSweep as exc:
            rows.append({"dest": dest, "points": len(p), "problem": str(exc)})
            continue
        pred = predict(p, fit.model)
        col = "pred_period_rec_ns" if "pred_period_rec_ns" in pred else "pred_period_ss_ns"
        err = 100 * (pred[col] - pred["period_med_ns"]) / pred["period_med_ns"]
        rows.append({"dest": dest, "points": len(pred), "R_gbps": fit.model.rate_gbps, "period_err_median_pct": float(np.nanmedian(err)),
                     "period_abs_err_p90_pct": float(np.nanpercentile(np.abs(err), 90))})
    return pd.DataFrame(rows)


def worst_tiles(tiles: pd.DataFrame, n: int = WORST_TILES) -> pd.DataFrame:
    """The ``n`` backpressured tiles with the largest stall (max of predicted and measured)."""
    t = tile_configs(tiles)
    t = t[t["backpressured"]]
    worst = np.fmax(t["predicted_stall_ns"], t["measured_stall_ns"])
    t = t.assign(worst_ns=worst).nlargest(n, "worst_ns")
    cols = {"dest": "dest", "shape": "shape", "schedule": "schedule", "cta": "CTA", "position": "position", "tile": "tile",
            "tile_kind": "kind", "expert": "expert", "wave": "wave", "epilogue_span_ns": "T_RS (ns, probe)",
            "cover_ns": "T_cover (ns, probe)", "predicted_stall_ns": "Δt pred (ns, probe)", "measured_stall_ns": "Δt meas (ns, probe)"}
    return t[list(cols)].rename(columns=cols)


def build_sections(run, worst_n: int = WORST_TILES) -> list[Section]:
    """The report's sections for one run (verdict first)."""
    from xstage_trace.reports.verdict_text import headline, verdict_table, with_sentences

    tiles, table3 = run.tiles(), run.table3()
    trials = slowest_rank_trials(run_trials(run))
    verdicts = with_sentences(verdict_table(run))
    man = run.manifest
    points = run.calibration()
    cal = calibration_residuals(points) if len(points) else pd.DataFrame()
    cal_lines = [f"- calibration {r.dest}: not fitted: {r.problem}" if isinstance(getattr(r, "problem", None), str) else
                 f"- calibration {r.dest}: {r.points} periodic points, R = {r.R_gbps:.1f} GB/s, median period error {r.period_err_median_pct:+.2f} %, "
                 f"p90 |error| {r.period_abs_err_p90_pct:.2f} % (sender-visible)" for r in cal.itertuples()]
    scope = f"stalls: {SCOPE_PROBE}; {SCOPE_KERNEL}" if len(verdicts) else (SCOPE_SENDER if len(cal) else SCOPE_KERNEL)
    answer = [headline(verdicts)] + [_bold_name(t) for t in verdicts["sentence"]] if len(verdicts) else \
        ["No fused-kernel tiles in this run (no Table 3, no stall verdict)" + (f"; {len(trials)} kernel trials are summarized below." if len(trials) else ".")]
    secs = [Section("Verdict", scope, answer + (cal_lines if verdicts.empty else []) + [f"> warning: {w}" for w in run.warnings()],
                    figures=["stall"] if len(verdicts) else [])]
    if len(table3):
        secs.append(Section("Table 3 (docs/model.md §5)", f"{SCOPE_PROBE}; kernel columns: {SCOPE_KERNEL}",
                            ["One row per configuration and schedule, medians over its remote-store tiles. The measured stall is the slot wait "
                             "beyond the control's floor plus the compute span beyond the control's (a stall the slot model cannot see); the slot "
                             "model's Δt = [T_lead + T_RS − T_cover]₊ per tile; the calibrated prediction needs --calibration. Every column: "
                             "`open_run(RUN).table3()`."],
                            table3_display(table3)))
        secs.append(Section("Verdict per configuration and schedule", f"{SCOPE_PROBE}; {SCOPE_KERNEL}", [],
                            verdict_display(verdicts.drop(columns=["sentence"])), details=True))
    if len(trials):
        secs.append(Section("Kernel time", SCOPE_KERNEL, [f"{len(trials)} trials (launches under a probe dump's configuration, warm-ups excluded)."], kernel_time_table(trials), details=True, figures=["kernel_time"]))
    bursts = run.bursts()
    if len(bursts):
        slices = run.probe_slices().drop_duplicates("dump")
        labels = pd.Series(config_names(slices["label"]).to_numpy(), index=slices["dump"].to_numpy())
        text = [f"{len(bursts)} bursts reconstructed from overlapping remote-store spans across SMs."]
        if bursts["rho"].isna().all():
            text.append("No calibration was given to analyze (--calibration): ρ, q and the capacity guard are not computed.")
        else:
            text.append(f"Audited against the calibration `{man.get('calibration')}` (ρ = V/(R·(T_iss^0+G)), guard q + b_iso ≤ Q).")
        secs.append(Section("Burst audit (docs/model.md §4)", SCOPE_SENDER, text, burst_audit_table(bursts, labels), details=True, figures=["bursts"]))
    res_text, res_table = [], None
    if len(verdicts) and len(tiles):
        res_text.append("Model residual = measured − predicted MMA stall of each Linear-2 tile (docs/model.md §5, the slot model).")
        res_table = model_residuals(verdicts, tiles)
    if len(cal):
        res_text += ["Calibration points in this run, fitted here (docs/model.md §3); period error of the recurrence prediction:"] + cal_lines
    align = run.alignment()
    if len(align):
        res_text += [f"- clock alignment {r.rank}: {r.dumps_matched}/{r.dumps_total} dumps inside their kernels, residual {r.residual_ns:.0f} ns, " + (f"drift {r.drift_ppm:.2f} ± {r.drift_uncertainty_ppm:.2f} ppm" if pd.notna(r.drift_ppm) else "drift not identified") + " (probe globaltimer vs nsys)"
                     for r in align.itertuples()]
    if res_text:
        secs.append(Section("Calibration residuals", f"{SCOPE_PROBE}; alignment: ns", res_text, res_table, figures=["tile_stall"] if res_table is not None else []))
    if len(tiles):
        n_bp = int(tiles["backpressured"].sum())
        secs.append(Section("Backpressured tiles, worst first", "ns, probe clock per SM",
                            [f"{n_bp} of {len(tiles)} tiles backpressured (predicted or measured stall above {run_noise_ns(tiles):.0f} ns); the {min(worst_n, n_bp)} largest:"],
                            worst_tiles(tiles, worst_n), details=True))
    inputs = man.get("inputs", [])
    from xstage_trace.base.paths import shown_path

    run_lines = [f"- run folder: `{shown_path(run.path)}`", f"- GPUs: {', '.join(man.get('gpus', [])) or 'unknown'}",
                 f"- nsys: {', '.join(man.get('nsys_versions', [])) or 'none'}; time base: {man.get('time_base')}",
                 f"- inputs: {len(inputs)} ({sum(i.get('kind') == 'probe' for i in inputs)} probe dumps)"]
    if man.get("nvtx_filter"):
        f = man["nvtx_filter"]
        selector = " ".join(([f"`{f['pattern']}`"] if f.get("pattern") is not None else []) + ([f"in domain `{f['domain']}`"] if f.get("domain") else []))
        run_lines.append(f"- NVTX filter: {selector} kept {f['kernels_kept']} of {f['kernels_total']} kernels")
    secs.append(Section("Run", "", run_lines + [f"- xstage-trace {man.get('tool_version', '?')}"]))
    return secs
