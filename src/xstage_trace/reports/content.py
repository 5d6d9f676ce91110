"""What a run report says, independent of the output format: a list of sections (title, timing
scope, text, table, figures) built from the run API only. reports/markdown.py and reports/html.py
render the same sections."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from xstage_trace.analysis.verdict import config_verdicts, table3_schedules
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


def headline(verdicts: pd.DataFrame, trials: pd.DataFrame) -> list[str]:
    """The verdict lines: stall-bound configurations and the fastest schedule per configuration."""
    if verdicts.empty:
        return ["No fused-kernel tiles in this run (no Table 3, no stall verdict)" + (f"; {len(trials)} kernel trials are summarized below." if len(trials) else ".")]
    bound = verdicts[verdicts["verdict"] == "stall-bound"]
    agree = verdicts["model_agrees"].dropna()
    lines = [f"**{len(bound)} of {len(verdicts)}** configuration × schedule pairs are **stall-bound** (median predicted or "
             f"measured MMA stall per Linear-2 tile above the {verdicts['noise_us'].iloc[0] * 1e3:.0f} ns noise floor, or by mainloop inflation: "
             f"most Linear-2 mainloops slower than the local control's while the slot wait stays at its floor; probe clock per SM); "
             f"prediction and measurement agree on {int(agree.sum())} of {len(agree)}."]
    keys = [c for c in ("dest", "shape", "variant", "kernel") if c in verdicts]
    for key, g in verdicts.groupby(keys, sort=True):  # one line per configuration
        key = key if isinstance(key, tuple) else (key,)
        parts = [f"{r.schedule} {r.verdict}{_cause(r)} (Δt pred {r.predicted_stall_us:.2f} / meas {r.measured_stall_us:.2f} µs per tile, probe clock)"
                 for r in g.itertuples()]
        line = f"- `{' '.join(map(str, key))}`: " + "; ".join(parts)
        ms = g.dropna(subset=["kernel_ms"])
        if len(ms) >= 2:
            best, worst = ms.loc[ms["kernel_ms"].idxmin()], ms.loc[ms["kernel_ms"].idxmax()]
            line += (f". Kernel time (nsys, median): {best.schedule} {best.kernel_ms:.3f} ms vs {worst.schedule} "
                     f"{worst.kernel_ms:.3f} ms ({100 * (best.kernel_ms / worst.kernel_ms - 1):+.1f} %)")
        lines.append(line)
    if "inflated_share" in verdicts:  # absent for a Table 3 written before the diagnosis
        blind = verdicts[verdicts["inflated_share"].isna() & verdicts["measured_stall_us"].notna()]
        names = sorted({" ".join(map(str, k)) for k in blind[keys].itertuples(index=False, name=None)})
        if names:
            lines.append(f"- mainloop inflation not judged for {', '.join(f'`{n}`' for n in names)}: no local-store control of the same "
                         "shape and operand path in this run (analyze the control dumps together with these to see stalls the slot model cannot)")
    return lines


def _cause(row) -> str:
    """The headline's note on a stall the slot model does not see (``analysis.verdict.configuration_diagnosis``)."""
    if getattr(row, "diagnosis", "none") == "mainloop_inflation":
        return " by mainloop inflation"
    return ""


def table3_display(table3: pd.DataFrame) -> pd.DataFrame:
    """Table 3 with headers that carry units and timing scope."""
    names = {"span_{s}_us": "T_RS {s} (µs, probe)", "stall_{s}_pred_medians_us": "Δt {s} pred, medians (µs, probe)",
             "stall_{s}_pred_tiles_us": "Δt {s} pred, per tile (µs, probe)",
             "stall_{s}_meas_us": "Δt {s} meas (µs, probe)", "backpressured_{s}": "bp tiles {s}",
             "inflated_{s}": "mainloop-inflated tiles {s}", "kernel_ms_{s}": "kernel {s} (ms, nsys)"}
    rename = {"mainloop_l2_us": "T_mma L2 (µs, probe)", "mainloop_l1_us": "T_mma L1 (µs, probe)", "tiles_l2": "L2 tiles"}
    for s in table3_schedules(table3):
        rename.update({k.format(s=s): v.format(s=s) for k, v in names.items()})
    keep = [c for c in table3.columns if c in rename or c in ("dest", "shape", "variant", "kernel")]
    return table3[keep].rename(columns=rename)


def burst_audit_table(bursts: pd.DataFrame, labels: pd.Series) -> pd.DataFrame:
    """Spec §4 audit per burst sequence (one dump): bursts, volume, median issue time, max ρ,
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
    its periodic points per store path (measured vs recurrence prediction, %)."""
    from xstage_trace.analysis.calibration_fit import fit_calibration, predict

    rows = []
    for dest, p in points.groupby("dest", sort=True):  # one fit per store path
        fit = fit_calibration(p, store_path=str(dest))
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
    tiles, table3 = run.tiles(), run.table3()
    trials = slowest_rank_trials(run_trials(run))
    verdicts = config_verdicts(table3, run_noise_ns(tiles)) if len(table3) else config_verdicts(pd.DataFrame(), None)
    man = run.manifest
    points = run.calibration()
    cal = calibration_residuals(points) if len(points) else pd.DataFrame()
    cal_lines = [f"- calibration {r.dest}: {r.points} periodic points, R = {r.R_gbps:.1f} GB/s, median period error {r.period_err_median_pct:+.2f} %, "
                 f"p90 |error| {r.period_abs_err_p90_pct:.2f} % (sender-visible)" for r in cal.itertuples()]
    scope = f"stalls: {SCOPE_PROBE}; {SCOPE_KERNEL}" if len(verdicts) else (SCOPE_SENDER if len(cal) else SCOPE_KERNEL)
    secs = [Section("Verdict", scope, headline(verdicts, trials) + (cal_lines if verdicts.empty else []) + [f"> warning: {w}" for w in run.warnings()],
                    figures=["stall"] if len(verdicts) else [])]
    if len(table3):
        secs.append(Section("Table 3 (docs/model.md §5)", f"{SCOPE_PROBE}; kernel columns: {SCOPE_KERNEL}",
                            ["Medians over the Linear-2 tiles of each dump; T_mma L1 is the Linear-1 mainloop that covers a Linear-2 tile after interleaving. "
                             "Mainloop-inflated tiles: Linear-2 mainloops slower than the local control's of the same shape (p99, beyond noise and 5 %), "
                             "a stall the slot model cannot see; more than half of them make the schedule stall-bound by mainloop inflation."],
                            table3_display(table3)))
        shown = verdicts.rename(columns={"predicted_stall_us": "Δt pred (µs, probe)", "measured_stall_us": "Δt meas (µs, probe)",
                                         "backpressured_tiles": "bp tiles", "kernel_ms": "kernel (ms, nsys)", "noise_us": "noise (µs, probe)"})
        secs.append(Section("Verdict per configuration and schedule", f"{SCOPE_PROBE}; {SCOPE_KERNEL}", [], shown, details=True))
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
        res_text.append("Model residual = measured − predicted MMA stall of each Linear-2 tile (docs/model.md §5).")
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
    run_lines = [f"- run folder: `{run.path}`", f"- GPUs: {', '.join(man.get('gpus', [])) or 'unknown'}",
                 f"- nsys: {', '.join(man.get('nsys_versions', [])) or 'none'}; time base: {man.get('time_base')}",
                 f"- inputs: {len(inputs)} ({sum(i.get('kind') == 'probe' for i in inputs)} probe dumps)"]
    if man.get("nvtx_filter"):
        f = man["nvtx_filter"]
        selector = " ".join(([f"`{f['pattern']}`"] if f.get("pattern") is not None else []) + ([f"in domain `{f['domain']}`"] if f.get("domain") else []))
        run_lines.append(f"- NVTX filter: {selector} kept {f['kernels_kept']} of {f['kernels_total']} kernels")
    secs.append(Section("Run", "", run_lines + [f"- xstage-trace {man.get('tool_version', '?')}"]))
    return secs
