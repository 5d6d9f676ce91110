"""``xstage-trace piggyback``: the FlashAttention Q-loop piggyback audit (docs/model.md §7) on a traced FA3 run:
per shape and calibrated store path G*, M_ub* and the verdict from the local control's Q-loops, and
the predicted vs measured Q-loop where O was stored over that path."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.cli import app, emit, out

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


@app.command("piggyback")
def piggyback(
    run_dir: Path = typer.Argument(..., help="run folder written by xstage-trace analyze from FA3 dumps (recipe fa3)"),
    calibration: List[Path] = typer.Option(..., "--calibration", help="calibration JSON of a store path (repeat: host, local)"),
    control: str = typer.Option("local", "--control", help="the dest of the control runs (O in local HBM)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write piggyback.md here (default: nothing is written)"),
    csv: Optional[Path] = typer.Option(None, "--csv", help="also write the per-shape-and-path table as CSV"),
    tiles_csv: Optional[Path] = typer.Option(None, "--tiles-csv", help="also write the per-tile predicted vs measured Q-loops as CSV"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (the per-shape-and-path rows)"),
    force: bool = typer.Option(False, "--force", help="replace -o/--csv/--tiles-csv files that are earlier xstage-trace output (never anything else)"),
):
    """docs/model.md §7 per shape and store path: G*, M_ub*, verdict, covered bursts; Q-loop predicted vs measured."""
    from xstage_trace import open_run
    from xstage_trace.analysis.piggyback import piggyback_audit, qloop_tiles
    from xstage_trace.base.errors import InputError
    from xstage_trace.base.output import check_outputs, write_outputs
    from xstage_trace.collectors.calibration_io import load_platforms

    targets = check_outputs({output: MARKDOWN_MARK, csv: None, tiles_csv: None}, inputs=[run_dir, *calibration], force=force)
    run = open_run(run_dir)
    tiles = qloop_tiles(run.probes(), run.dumps())
    if tiles.empty:
        raise InputError(run_dir, "holds no FA3 Q-loop tiles (mainloop and epilogue spans with seqlen/causal/block sizes in the dump label)",
                         "analyze probe dumps written by sample_traces/h200_fa3/run/driver.cu (recipe fa3)")
    if not (tiles["dest"] == control).any():
        raise InputError(run_dir, f"has no control dumps (dest={control})", "trace each shape once with O in local HBM, or name the control's dest with --control")
    per_tile, summary = piggyback_audit(tiles, load_platforms(list(calibration), lambda model: [str(model.store_path)]), control)
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
