"""``xstage-trace analyze``: collect, align, analyze, write the run dataset, print the summary."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from xstage_trace.cli import app, emit, err, out
from xstage_trace.collectors.nsys_names import METRIC_PATTERNS

def _progress(enabled: bool):
    """A rich progress factory for long steps (silent under --json)."""
    if not enabled:
        return None, None
    prog = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=err, transient=True)

    def start(desc: str, total: int):
        task = prog.add_task(desc, total=total)
        return lambda: prog.advance(task)

    return prog, start




@app.command()
def analyze(
    inputs: List[Path] = typer.Argument(..., help=".nsys-rep, .sqlite, nsys parquetdir, probe dumps (.xsp or a folder of them), or a run folder"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="run dataset folder (default: RUN beside the first input, named after it)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of the summary"),
    nsys: Optional[str] = typer.Option(None, "--nsys", help="nsys binary for .nsys-rep inputs"),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="calibration JSON (from calibrate fit) for ρ, q and the guard"),
    allow_overflow: bool = typer.Option(False, "--allow-overflow", help="accept probe dumps whose buffers overflowed (dropped records are reported)"),
    nvtx: Optional[str] = typer.Option(None, "--nvtx", help="keep only the kernels launched under NVTX ranges of this name (or glob, e.g. '*schedule=wave*')"),
):
    """Collect, align and analyze; write the run dataset and print a summary."""
    from xstage_trace.runner import analyze_inputs

    prog, start = _progress(not as_json)
    if prog:
        prog.start()
    try:
        summary = analyze_inputs(inputs, output, nsys=nsys, calibration=calibration, allow_overflow=allow_overflow, progress=start, nvtx=nvtx)
    finally:
        if prog:
            prog.stop()
    if as_json:
        emit(summary)
        return
    t = Table(title=f"xstage-trace run: {summary['run_dir']}", show_header=False)
    for k in ("gpus", "kernels", "nvtx_ranges", "probes", "bursts", "backpressured_tiles", "time_base"):
        t.add_row(k, str(summary.get(k)))
    known = {name for name, _ in METRIC_PATTERNS}
    shown = {k: v for k, v in summary["gpu_metrics"].items() if k in known}
    others = len(summary["gpu_metrics"]) - len(shown)
    t.add_row("gpu_metrics", (", ".join(f"{k}: {v}" for k, v in sorted(shown.items())) or "none") + (f" (+{others} more)" if others else ""))
    for r, a in summary.get("alignment", {}).items():
        t.add_row(f"alignment {r}", f"{a['dumps_matched']}/{a['dumps_total']} dumps in their kernels, residual {a['residual_ns']:.0f} ns, drift {a['drift_ppm']:.2f} ppm")
    if summary.get("calibration_points"):
        t.add_row("calibration points", str(summary["calibration_points"]))
    out.print(t)
    if summary.get("table3"):
        t3 = Table(title="Table 3 (Linear-2 tiles, medians, µs; timing scope: probe clock per SM)")
        cols = {"dest": "dest", "shape": "shape", "span_wave_us": "span W", "span_interleaved_us": "span I",
                "mainloop_l2_us": "T L2", "mainloop_l1_us": "T L1", "stall_wave_pred_us": "Δt W pred",
                "stall_wave_meas_us": "Δt W meas", "stall_interleaved_pred_us": "Δt I pred",
                "stall_interleaved_meas_us": "Δt I meas", "backpressured_wave": "bp W", "backpressured_interleaved": "bp I",
                "kernel_ms_wave": "ms W", "kernel_ms_interleaved": "ms I"}
        cols = {c: h for c, h in cols.items() if c in summary["table3"][0]}
        for head in cols.values():
            t3.add_column(head)
        t3.caption = "W = expert-wave, I = interleaved, bp = backpressured tiles, ms = median kernel time (nsys)"
        for row in summary["table3"]:  # one row per configuration
            t3.add_row(*[f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in cols])
        out.print(t3)
    for w in summary["warnings"]:
        err.print(f"[yellow]warning:[/yellow] {w}")
