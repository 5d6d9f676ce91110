"""``xstage-trace piggyback``: the FlashAttention Q-loop piggyback audit (docs/model.md §7) on a traced FA3 run:
per shape and calibrated store path G*, M_ub* and the verdict from the local control's Q-loops, and
the predicted vs measured Q-loop where O was stored over that path."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.cli import app, emit, out


@app.command("piggyback")
def piggyback(
    run_dir: Path = typer.Argument(..., help="run folder written by xstage-trace analyze from FA3 dumps (recipe fa3)"),
    calibration: Optional[List[Path]] = typer.Option(None, "--calibration", help="calibration JSON of a store path (repeat: host, local; default: the run's own)"),
    control: str = typer.Option("local", "--control", help="the dest of the control runs (O in local HBM)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write piggyback.md here (default: nothing is written)"),
    csv: Optional[Path] = typer.Option(None, "--csv", help="also write the per-shape-and-path table as CSV"),
    tiles_csv: Optional[Path] = typer.Option(None, "--tiles-csv", help="also write the per-tile predicted vs measured Q-loops as CSV"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (the per-shape-and-path rows)"),
    force: bool = typer.Option(False, "--force", help="replace -o/--csv/--tiles-csv files that are earlier xstage-trace output (never anything else)"),
):
    """docs/model.md §7 per shape and store path: G*, M_ub*, verdict, covered bursts; Q-loop predicted vs measured."""
    from xstage_trace import open_run
    from xstage_trace.base.output import check_outputs, write_outputs
    from xstage_trace.reports.piggyback import MARKDOWN_MARK, display_frame, piggyback_markdown

    calibration = list(calibration or [])
    targets = check_outputs({output: MARKDOWN_MARK, csv: None, tiles_csv: None}, inputs=[run_dir, *calibration], force=force)
    run = open_run(run_dir)
    per_tile, summary = run.piggyback(calibration, control)
    calibration = [Path(c) for c in calibration] or [run.calibration_origin() or run.calibration_path()]
    inputs = sorted({str(Path(i["path"]).parent) for i in run.manifest.get("inputs", []) if i.get("kind") == "probe"})
    texts = {output: piggyback_markdown(summary, run_dir, inputs, list(calibration)), csv: summary.to_csv(index=False),
             tiles_csv: per_tile.to_csv(index=False)}
    write_outputs(targets, texts)
    if as_json:
        emit({"piggyback_md": str(output) if output else None, "rows": summary.astype(object).where(summary.notna(), None).to_dict("records")})
        return
    out.print(display_frame(summary).to_string(index=False))
    if output is not None:
        out.print(f"wrote {output}")
