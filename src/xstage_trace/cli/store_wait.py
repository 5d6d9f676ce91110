"""``xstage-trace store-wait``: per tile, the staging-buffer store stall the calibrated path predicts
vs what the tiles measured (kernels with one staging buffer per CTA, e.g. DeepGEMM sm_90)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.cli import app, emit, out

MARKDOWN_MARK = b"# xstage-trace store-wait"
COLUMNS = {
    "dest": "D in", "shape": "shape", "tiles": "tiles", "launches": "launches", "rate_model_gbps": "R model (GB/s)",
    "rate_rounds_gbps": "R rounds (GB/s)", "pred_median_us": "pred med", "pred_p90_us": "pred p90",
    "wait_median_us": "wait med", "wait_p90_us": "wait p90", "wait_spearman": "ρ wait", "wait_mae_us": "MAE wait",
    "excess_median_us": "excess med", "excess_p90_us": "excess p90", "excess_spearman": "ρ excess", "excess_mae_us": "MAE excess",
}


def models_by_dest(paths: list[Path], dests) -> dict:
    """Each destination of the run with the one calibration whose store path starts with its name
    (``host`` → a host calibration, ``local`` → the local control's); two for one dest is an error."""
    from xstage_trace.collectors.calibration_io import load_platforms

    return load_platforms(paths, lambda model: [str(d) for d in dests if str(model.store_path).startswith(str(d))])


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


@app.command("store-wait")
def store_wait(
    run_dir: Path = typer.Argument(..., help="run folder written by xstage-trace analyze"),
    calibration: List[Path] = typer.Option(..., "--calibration", help="calibration JSON of a store path (repeat: host, local control)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write store_wait.md here (default: nothing is written)"),
    csv: Optional[Path] = typer.Option(None, "--csv", help="also write the per-case table as CSV"),
    force: bool = typer.Option(False, "--force", help="replace -o/--csv files that are earlier xstage-trace output (never anything else)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (the per-case rows)"),
):
    """Per case (D destination, shape): predicted store stall vs measured store wait and mainloop excess (median, p90, Spearman, MAE)."""
    from xstage_trace import open_run
    from xstage_trace.analysis.stall import store_wait_summary, store_wait_vs_model
    from xstage_trace.base.errors import InputError
    from xstage_trace.base.output import check_outputs, write_outputs

    targets = check_outputs({output: MARKDOWN_MARK, csv: None}, inputs=[run_dir, *calibration], force=force)
    run = open_run(run_dir)
    tiles, bursts = run.tiles(), run.bursts()
    if tiles.empty or bursts.empty:
        raise InputError(run_dir, "holds no tiles with store bursts", "analyze probe dumps of a kernel with mainloop, store-wait and store events first")
    models = models_by_dest(list(calibration), tiles["dest"].dropna().unique())
    if not models:
        raise InputError(calibration[0], f"calibrates none of the run's destinations {sorted(map(str, tiles['dest'].dropna().unique()))}",
                         "pass the calibration of the path the kernel stored to (e.g. calibration_host.json)")
    summary = store_wait_summary(store_wait_vs_model(tiles, bursts, models), bursts)
    texts = {output: store_wait_markdown(summary, run_dir, list(calibration)), csv: summary.to_csv(index=False)}
    write_outputs(targets, texts)
    if as_json:
        emit({"store_wait_md": str(output) if output else None, "cases": summary.astype(object).where(summary.notna(), None).to_dict("records")})
        return
    out.print(summary.rename(columns=COLUMNS).to_string(index=False))
    if output is not None:
        out.print(f"wrote {output}")
