"""``xstage-trace analyze``: collect, align, analyze, write the run dataset, print the summary."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.cli import app, emit, err, out, warn
from xstage_trace.base.errors import printable

def _progress(enabled: bool):
    """A rich progress factory for long steps (silent under --json)."""
    if not enabled:
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=err.console, transient=True)

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
    rank: List[str] = typer.Option([], "--rank", help="REPORT=N: the rank of a report that holds no probe dumps (others are told by their dumps)"),
    warmup_launches: int = typer.Option(0, "--warmup-launches", min=0, help="leave out the first N launches of each configuration from kernel times (for captures whose NVTX labels carry no trial=N)"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="run the per-dump work on Dask: local:N (N worker processes) or a scheduler address (docs/scale.md)"),
    force: bool = typer.Option(False, "--force", help="replace RUN_DIR when it is an earlier xstage-trace run folder (never anything else)"),
    nvtx: Optional[str] = typer.Option(None, "--nvtx", help="keep only the kernels launched under NVTX ranges of this name (or glob, e.g. '*schedule=wave*'), in any domain unless --nvtx-domain names one"),
    nvtx_domain: Optional[str] = typer.Option(None, "--nvtx-domain", help="only NVTX ranges of this domain (name or glob, e.g. xstage) count for --nvtx; alone: kernels under any range of the domain"),
):
    """Collect, align and analyze; write the run dataset and print a summary."""
    from xstage_trace.collectors.pairing import parse_rank_overrides
    from xstage_trace.pipeline.runner import analyze_inputs

    overrides = parse_rank_overrides(rank)

    prog, start = _progress(not as_json and err.is_terminal)  # no bar (nor its blank line) in logs and pipes
    if prog:
        prog.start()
    try:
        summary = analyze_inputs(inputs, output, nsys=nsys, calibration=calibration, allow_overflow=allow_overflow, progress=start,
                                 rank_overrides=overrides, warmup_launches=warmup_launches, force=force,
                                 scheduler=scheduler, nvtx=nvtx, nvtx_domain=nvtx_domain)
    finally:
        if prog:
            prog.stop()
    if as_json:
        emit(summary)
        return
    from rich.table import Table

    from xstage_trace.collectors.nsys_names import METRIC_PATTERNS

    t = Table(title=f"xstage-trace run: {printable(summary['run_dir'])}", show_header=False)
    for k in ("gpus", "kernels", "nvtx_ranges", "probes", "bursts", "backpressured_tiles", "time_base"):
        t.add_row(k, str(summary.get(k)))
    known = {name for name, _ in METRIC_PATTERNS}
    shown = {k: v for k, v in summary["gpu_metrics"].items() if k in known}
    others = len(summary["gpu_metrics"]) - len(shown)
    t.add_row("gpu_metrics", (", ".join(f"{k}: {v}" for k, v in sorted(shown.items())) or "none") + (f" (+{others} more)" if others else ""))
    for r, a in summary.get("alignment", {}).items():
        drift = (f"drift {a['drift_ppm']:.2f} ± {a['drift_uncertainty_ppm']:.2f} ppm" if a["drift_ppm"] is not None
                 else "drift not identified" + (f" (feasible {a['drift_range_ppm'][0]:.1f} … {a['drift_range_ppm'][1]:.1f} ppm)" if a["drift_range_ppm"] else ""))
        t.add_row(f"alignment {r}", f"{a['report']}: {a['dumps_matched']}/{a['dumps_total']} dumps in their kernels, offset {a['offset_ns'] / 1e3:.1f} µs, residual {a['residual_ns']:.0f} ns, {drift}")
    if summary.get("calibration_points"):
        t.add_row("calibration points", str(summary["calibration_points"]))
    out.print(t)
    for v in summary.get("verdicts", []):
        stall = "n/a" if v["measured_stall_us"] is None else f"{v['measured_stall_us']:.3g} µs"
        out.print(f"{v['dest']} {v['shape']} {v['variant'] or '-'} {v['schedule'] or '-'}: {v['verdict']}"
                  + (f" ({v['diagnosis']})" if v["diagnosis"] != "none" else "") + f", median stall {stall}, {v['stalled_tiles']}/{v['tiles']} tiles stalled",
                  markup=False, highlight=False)
    if summary.get("table3"):
        t3 = Table(title="Table 3 (remote-store tiles, medians, µs; kernel ms; timing scope: probe clock per SM)")
        cols = {"dest": "dest", "shape": "shape", "variant": "variant", "schedule": "schedule", "tiles": "tiles", "stalled_tiles": "stalled",
                "stall_ns": "stall", "slot_pred_ns": "Δt pred", "slot_meas_ns": "Δt meas", "forward_stall_ns": "fwd pred", "kernel_ns": "ms"}
        for head in cols.values():
            t3.add_column(head, no_wrap=True)
        t3.caption = ("stall = slot wait + compute span beyond the control's; Δt = the slot model (docs/model.md §5): per-tile "
                      "[T_lead + T_RS − T_cover]₊ vs the measured slot wait; fwd pred = calibrated forward prediction; "
                      "ms = kernel time (nsys), per trial the slowest rank, median over trials")
        for row in summary["table3"]:  # one row per configuration and schedule
            cells = []
            for c in cols:
                x = row.get(c)
                scale = 1e6 if c == "kernel_ns" else 1e3
                cells.append("-" if x is None or (isinstance(x, float) and x != x) else f"{x / scale:.3g}" if c.endswith("_ns") else str(x))
            t3.add_row(*cells)
        out.print(t3)
    for w in summary["warnings"]:
        warn(w)
