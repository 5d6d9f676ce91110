"""piggyback.md: the FlashAttention Q-loop piggyback audit of a run (``Run.piggyback``, docs/model.md §7) as a
table whose every number names its unit and timing scope."""

from __future__ import annotations

from pathlib import Path

MARKDOWN_MARK = b"# xstage-trace piggyback"
COLUMNS = {
    "shape": "shape", "path": "path", "recovery_gap_us": "G* (µs)", "capacity_ok": "b^iso ≤ Q", "sigma_us": "σ (µs/KV)",
    "m_ub_tokens": "M_ub*", "seqlen": "M", "verdict": "verdict", "gap_median_us": "gap med (µs)", "covered_fraction": "covered",
    "predicted_qloop_median_us": "Q-loop pred (µs)", "measured_qloop_median_us": "Q-loop meas (µs)",
    "qloop_median_error": "meas/pred − 1", "implied_rate_gbps": "R implied (GB/s)", "epilogue_median_us": "epi meas (µs)",
}


def display_frame(summary):
    """The summary in µs with the table's column names."""
    shown = summary.copy()
    for col in [c for c in shown.columns if c.endswith("_ns")]:
        shown[col[:-3] + "_us"] = shown[col] / 1e3
    return shown[[c for c in COLUMNS if c in shown]].rename(columns=COLUMNS)


def piggyback_markdown(summary, run_dir: Path, inputs: list[str], calibrations: list[Path]) -> str:
    """piggyback.md: the table with every number's unit and timing scope named (``inputs``: the folders of the run's dumps)."""
    from xstage_trace.reports.markdown import md_table

    from xstage_trace.base.paths import shown_path

    lines = ["# xstage-trace piggyback (docs/model.md §7)", "", f"- run: `{shown_path(run_dir)}`", *[f"- dumps: `{shown_path(d)}`" for d in inputs],
             *[f"- calibration: `{shown_path(p)}`" for p in calibrations], "",
             "_Timing scope: per-tile spans, probe clock per SM (µs); rates in GB/s. G*, σ (median Q-loop per K/V block), "
             "gap (the next tile's Q-loop) and covered (share of bursts whose gap ≥ G*) come from the local control's "
             "tiles; the verdict is docs/model.md §7's at the run's sequence length M. Q-loop pred = max(G, V/R − T_iss^0) after a "
             "burst, G = the control's Q-loop of the same tile; meas = the Q-loop where O went over the path; R implied = "
             "V / (measured Q-loop + epilogue), the path's drain rate where the run is drain-limited._", "",
             md_table(display_frame(summary)), ""]
    return "\n".join(lines)
