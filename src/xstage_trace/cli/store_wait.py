"""``xstage-trace store-wait``: per tile, the staging-buffer store stall the calibrated path predicts
vs what the tiles measured (kernels with one staging buffer per CTA, e.g. DeepGEMM sm_90)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.cli import app, emit, out


@app.command("store-wait")
def store_wait(
    run_dir: Path = typer.Argument(..., help="run folder written by xstage-trace analyze"),
    calibration: Optional[List[Path]] = typer.Option(None, "--calibration", help="calibration JSON of a store path (repeat: host, local control; default: the run's own)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write store_wait.md here (default: nothing is written)"),
    csv: Optional[Path] = typer.Option(None, "--csv", help="also write the per-case table as CSV"),
    force: bool = typer.Option(False, "--force", help="replace -o/--csv files that are earlier xstage-trace output (never anything else)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (the per-case rows)"),
):
    """Per case (D destination, shape): predicted store stall vs measured store wait and mainloop excess (median, p90, Spearman, MAE)."""
    from xstage_trace import open_run
    from xstage_trace.base.output import check_outputs, write_outputs
    from xstage_trace.reports.store_wait import COLUMNS, MARKDOWN_MARK, store_wait_markdown

    calibration = list(calibration or [])
    targets = check_outputs({output: MARKDOWN_MARK, csv: None}, inputs=[run_dir, *calibration], force=force)
    run = open_run(run_dir)
    summary = run.store_wait(calibration)
    used = [Path(c) for c in calibration] or [run.calibration_origin() or run.calibration_path()]
    texts = {output: store_wait_markdown(summary, run_dir, used), csv: summary.to_csv(index=False)}
    write_outputs(targets, texts)
    if as_json:
        emit({"store_wait_md": str(output) if output else None, "cases": summary.astype(object).where(summary.notna(), None).to_dict("records")})
        return
    out.print(summary.rename(columns=COLUMNS).to_string(index=False))
    if output is not None:
        out.print(f"wrote {output}")
