"""store_wait.md: the staging-buffer wait audit of a run (``Run.store_wait``, docs/model.md §4, §5) as a table
whose every number names its unit and timing scope."""

from __future__ import annotations

from pathlib import Path

MARKDOWN_MARK = b"# xstage-trace store-wait"
COLUMNS = {
    "dest": "D in", "shape": "shape", "tiles": "tiles", "launches": "launches", "rate_model_gbps": "R model (GB/s)",
    "rate_rounds_gbps": "R rounds (GB/s)", "pred_median_us": "pred med", "pred_p90_us": "pred p90",
    "wait_median_us": "wait med", "wait_p90_us": "wait p90", "wait_spearman": "ρ wait", "wait_mae_us": "MAE wait",
    "excess_median_us": "excess med", "excess_p90_us": "excess p90", "excess_spearman": "ρ excess", "excess_mae_us": "MAE excess",
}


def store_wait_markdown(summary, run_dir: Path, calibrations: list[Path]) -> str:
    """store_wait.md: the table with every number's unit and timing scope named."""
    from xstage_trace.reports.markdown import md_table

    from xstage_trace.base.paths import shown_path

    lines = ["# xstage-trace store-wait", "", f"- run: `{shown_path(run_dir)}`",
             *[f"- calibration: `{shown_path(p)}`" for p in calibrations], "",
             "_Timing scope: per-tile spans, probe clock per SM (µs); rates in GB/s. pred = the model's stall of the tile's "
             "store round (docs/model.md §4 stalled trajectory, gap = the control's median mainloop of the shape); wait = measured "
             "staging-buffer wait beyond the control's floor; excess = the next tile's mainloop beyond the control's median; "
             "ρ = Spearman with pred (empty where a side is constant); MAE = mean |pred − measured|._", "",
             md_table(summary[[c for c in COLUMNS if c in summary]].rename(columns=COLUMNS)), ""]
    return "\n".join(lines)
