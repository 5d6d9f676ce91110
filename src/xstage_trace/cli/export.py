"""``xstage-trace export``: a run as a Perfetto protobuf or Chrome JSON timeline."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.cli import app, emit, out

FORMATS = ("perfetto", "chrome")


@app.command()
def export(
    run_dir: Path = typer.Argument(..., help="run folder written by xstage-trace analyze -o"),
    fmt: str = typer.Option("perfetto", "--format", help="perfetto (TrackEvent protobuf, open in ui.perfetto.dev) or chrome (trace-event JSON)"),
    output: Path = typer.Option(..., "-o", "--output", help="trace file to write (.pftrace / .json)"),
    dump: Optional[str] = typer.Option(None, "--dump", help="only the SM tracks of dumps matching this glob (e.g. '*host_S1_wave*')"),
    metric: Optional[List[str]] = typer.Option(None, "--metric", help="GPU metric to export as a counter (repeatable; 'all' for every metric; default: the known ones)"),
    as_json: bool = typer.Option(False, "--json", help="print what was written as one JSON object"),
    force: bool = typer.Option(False, "--force", help="replace the -o file when it is an earlier export of this format (never anything else)"),
):
    """GPU → kernels, NVTX, bursts, metric counters, SMs → CTA slots → tile spans (real ns, per-SM converted probe clock)."""
    from xstage_trace import open_run
    from xstage_trace.base.errors import InputError
    from xstage_trace.collectors.nsys_names import METRIC_PATTERNS
    from xstage_trace.reports.trace_model import build_timeline

    from xstage_trace.base.output import check_output

    if fmt not in FORMATS:
        raise InputError(None, f"--format {fmt!r} is not one of {', '.join(FORMATS)}", "use --format perfetto or --format chrome")
    if fmt == "perfetto":
        from xstage_trace.reports.perfetto_export import is_perfetto_export as ours
    else:
        from xstage_trace.reports.chrome_export import is_chrome_export as ours
    check_output(output, inputs=[run_dir], force=force, ours=ours, example="run.pftrace" if fmt == "perfetto" else "run.json")
    run = open_run(run_dir)
    metrics = None if metric and "all" in metric else (list(metric) if metric else [n for n, _ in METRIC_PATTERNS])
    if metric and metrics:
        present = sorted(set(run.gpu_metrics()["metric"].astype(str)))
        unknown = [m for m in metrics if m not in present]
        if unknown:
            raise InputError(run_dir, f"--metric {', '.join(map(repr, unknown))}: no such GPU metric in the run",
                             f"use 'all' or one of: {', '.join(present)}" if present else "the run has no GPU metrics (capture with nsys profile --gpu-metrics-devices=all)")
    tl = build_timeline(run, dump_pattern=dump, metrics=metrics)
    if tl.spans.empty and tl.counters.empty:
        raise InputError(run_dir, "nothing to export (no kernels, NVTX ranges, probes or metrics" + (f" for --dump {dump!r}" if dump else "") + ")",
                         "check --dump, or analyze an nsys report and probe dumps into the run")
    if fmt == "perfetto":
        from xstage_trace.reports.perfetto_export import write_perfetto

        counts = write_perfetto(tl, output)
    else:
        from xstage_trace.reports.chrome_export import write_chrome

        counts = write_chrome(tl, output)
    if as_json:
        emit(dict(counts, format=fmt, output=str(output)))
    else:
        out.print(f"wrote {output} ({fmt}: {counts['slices']} slices, {counts['counter_samples']} counter samples)")


@app.command("nsys-recipe-path")
def nsys_recipe_path():
    """Print the folder holding the xstage_tiles Nsight Systems recipe: NSYS_RECIPE_PATH=$(xstage-trace nsys-recipe-path)."""
    from xstage_trace.reports.recipe import recipe_root

    print(recipe_root())
