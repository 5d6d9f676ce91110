"""``xstage-trace analyze``: collect, align, analyze, write the run dataset, print the summary."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.cli import app, emit, err, out, warn
from xstage_trace.base.errors import printable

def _progress(enabled: bool):
    """A rich progress display for the steps that take over a second (silent under --json and in
    pipes): reading the inputs (spinner), the probe dumps (a bar), writing the run folder (spinner)."""
    if not enabled:
        return None, None
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=err.console, transient=True)
    reading = prog.add_task("reading inputs (nsys export, probe dump headers)", total=None)

    def start(desc: str, total: int):
        prog.update(reading, total=1, completed=1, visible=False)
        task = prog.add_task(desc, total=total)

        def tick():
            prog.advance(task)
            if prog.tasks[task].finished:
                prog.add_task("writing the run folder", total=None)
        return tick

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
    wide: bool = typer.Option(False, "--wide", help="print every Table 3 column (the default fits 120 columns)"),
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
        emit(with_verdicts(summary))
        return
    print_summary(summary, wide)


def with_verdicts(summary: dict) -> dict:
    """The summary with ``verdicts`` (one record per configuration × schedule) and
    ``verdict_sentences`` (reports/verdict_text), the same answer the printed summary leads with."""
    from xstage_trace import open_run
    from xstage_trace.reports.verdict_text import verdict_table, with_sentences

    run = open_run(summary["run_dir"])
    v = with_sentences(verdict_table(run))
    doc = dict(summary)
    w = run.link_whatif()  # docs/model.md §13: predicted kernel time and stall per configuration × alternative
    doc["link_whatif"] = w.astype(object).where(w.notna(), None).to_dict("records")
    doc.setdefault("verdicts", v.drop(columns=["sentence"]).to_dict("records"))
    doc["verdict_sentences"] = v["sentence"].tolist()
    return doc


TABLE3_KEYS = {"dest": "dest", "shape": "shape", "variant": "variant", "schedule": "schedule"}
TABLE3_SHORT = {"stalled_pct": "stalled\n%", "stall_ns": "stall\nµs", "compute_stall_ns": "compute\npart µs",
                "slot_pred_ns": "slot\npred µs", "forward_stall_ns": "fwd\npred µs", "kernel_ns": "kernel\nms", "speedup": "W/I"}
TABLE3_WIDE = {"tiles": "tiles", "stalled_tiles": "stalled", "backpressured_tiles": "bp", "inflated_tiles": "infl",
               "slot_meas_ns": "slot\nmeas µs", "stall_p99_ns": "stall\np99 µs", "store_span_ns": "T_RS\nµs", "cover_ns": "T_cover\nµs",
               "compute_ns": "compute\nµs", "control_compute_ns": "control\nµs", "noise_ns": "noise\nµs", "trials": "trials"}


def print_summary(summary: dict, wide: bool = False) -> None:
    """The answer first: the verdict per configuration, then Table 3 (key columns and the numbers the
    verdict rests on, 120 columns; every column with ``wide``), the run's inventory, warnings, and
    where the run was written with the next commands."""
    from rich.table import Table
    from rich.text import Text

    from xstage_trace import open_run
    from xstage_trace.base.paths import shown_path
    from xstage_trace.collectors.nsys_names import METRIC_PATTERNS
    from xstage_trace.reports.verdict_text import headline, verdict_table, with_sentences

    run_dir = summary["run_dir"]
    name = shown_path(run_dir)
    run = open_run(run_dir)
    v = with_sentences(verdict_table(run))
    if not out.is_terminal:  # piped or logged: 120 columns (the terminal's own width otherwise)
        out.console.width = 260 if wide else 120
    out.print(Text(f"Verdict ({name}; docs/model.md §5, stalls per Linear-2 tile on the probe clock, kernel time from nsys)", style="bold"))
    out.print(headline(v), highlight=False)
    for line in v["sentence"]:
        out.print(Text.assemble(("• ", "bold"), (line, "red" if ": stall-bound" in line else "")), highlight=False)
    table3 = run.table3()
    if len(table3):
        cols = dict(TABLE3_KEYS, **(dict(TABLE3_SHORT, **TABLE3_WIDE) if wide else TABLE3_SHORT))
        from xstage_trace.reports.verdict_text import schedule_speedups

        sp = schedule_speedups(v).set_index(["dest", "shape", "variant"])["speedup"]
        rows = table3.astype(object).where(table3.notna(), None).to_dict("records")
        for r in rows:  # on the wave row: the schedule speedup, wave / interleaved kernel time (nsys)
            key = (r["dest"], r["shape"], r["variant"])
            r["speedup"] = float(sp[key]) if r.get("schedule") == "wave" and key in sp.index and sp[key] == sp[key] else None
            r["stalled_pct"] = 100.0 * r["stalled_tiles"] / r["tiles"] if r.get("tiles") else None
        cols = {c: h for c, h in cols.items() if c in rows[0]}
        t3 = Table(title="Table 3 (remote-store tiles, medians; stalls on the probe clock per SM, kernel time nsys)", title_justify="left")
        for c, head in cols.items():
            key = c in TABLE3_KEYS
            t3.add_column(head, no_wrap=key, justify="left" if key else "right", overflow="fold")
        for r in rows:
            t3.add_row(*[_cell(r.get(c), c) for c in cols])
        t3.caption = ("stall = measured: slot wait + compute span beyond the control's (median); slot pred = the slot model's per-tile "
                      "[T_lead + T_RS − T_cover]₊; fwd pred = the calibrated forward prediction; kernel = per trial the slowest rank, median "
                      "over trials, warm-ups excluded; W/I = wave / interleaved kernel time" + ("" if wide else "; every column with --wide"))
        t3.caption_justify = "left"
        out.print(t3)
    t = Table(title=f"run: {name}", show_header=False, title_justify="left")
    for k in ("gpus", "kernels", "nvtx_ranges", "probes", "bursts", "backpressured_tiles", "time_base"):
        val = summary.get(k)
        t.add_row(k.replace("_", " "), ", ".join(val) if isinstance(val, list) else (f"{val:,}" if isinstance(val, int) else str(val)))
    known = {n for n, _ in METRIC_PATTERNS}
    shown = {k: v_ for k, v_ in summary["gpu_metrics"].items() if k in known}
    others = len(summary["gpu_metrics"]) - len(shown)
    t.add_row("gpu metrics", (f"{len(shown)} known metrics ({', '.join(sorted(shown))})" if shown else "none") + (f" (+{others} more)" if others else ""))
    for r, a in summary.get("alignment", {}).items():
        drift = (f"drift {a['drift_ppm']:.2f} ± {a['drift_uncertainty_ppm']:.2f} ppm" if a["drift_ppm"] is not None
                 else "drift not identified" + (f" (feasible {a['drift_range_ppm'][0]:.1f} … {a['drift_range_ppm'][1]:.1f} ppm)" if a["drift_range_ppm"] else ""))
        t.add_row(f"alignment {r}", f"{a['report']}: {a['dumps_matched']}/{a['dumps_total']} dumps in their kernels, offset {a['offset_ns'] / 1e3:.1f} µs, residual {a['residual_ns']:.0f} ns, {drift}")
    if summary.get("calibration_points"):
        t.add_row("calibration points", str(summary["calibration_points"]))
    out.print(t)
    for w in summary["warnings"]:
        warn(w)
    n_tables, size = _run_size(run_dir)
    out.print(Text(f"wrote {name} ({n_tables} tables, {size / 1e6:.1f} MB)", style="bold"), highlight=False)
    out.print(f"next: xstage-trace report {name}   ·   xstage-trace dashboard {name}   ·   xstage-trace compare BASE_RUN {name}",
              highlight=False, soft_wrap=True)


def _cell(value, column: str) -> str:
    """A Table 3 cell: counts with thousands separators, times to 3 significant digits, n/a for none."""
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if column in ("tiles", "stalled_tiles", "backpressured_tiles", "inflated_tiles", "trials"):
        return f"{int(value):,}"
    if isinstance(value, float):
        if column == "speedup":
            return f"{value:.2f}×"
        if column == "stalled_pct":
            return f"{value:.0f}"
        value = value / 1e6 if column == "kernel_ns" else value / 1e3 if column.endswith("_ns") else value
        return "0" if value == 0 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _run_size(run_dir: str) -> tuple[int, int]:
    """(tables, bytes on disk) of a written run folder: its Parquet tables (a file or a folder of parts each)."""
    from pathlib import Path as _P

    root = _P(run_dir)
    tables = {p.relative_to(root).parts[0] for p in root.rglob("*.parquet")}
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return len(tables), size
