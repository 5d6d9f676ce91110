"""The ``xstage-trace`` command line: a thin layer over collectors/ and analysis/."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from xstage_trace.collectors.nsys_names import METRIC_PATTERNS
from xstage_trace.errors import InputError
from xstage_trace.jsonable import json_default

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Tile-level profiling of GPU kernels that fuse compute with remote stores (the X-Stage model).")
calibrate_app = typer.Typer(no_args_is_help=True, help="Calibrate the platform model M_X = (T_iss^0, R, Q).")
model_app = typer.Typer(no_args_is_help=True, help="Evaluate the X-Stage model without a trace.")
instrument_app = typer.Typer(no_args_is_help=True, help="Build flags for the CUDA probes.")
app.add_typer(calibrate_app, name="calibrate")
app.add_typer(model_app, name="model")
app.add_typer(instrument_app, name="instrument")

err = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 160)  # piped or logged: wide enough for Table 3


def _emit(doc: dict) -> None:
    """One JSON object on stdout."""
    sys.stdout.write(json.dumps(doc, default=json_default) + "\n")


def _progress(enabled: bool):
    """A rich progress factory for long steps (silent under --json)."""
    if not enabled:
        return None, None
    prog = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=err, transient=True)

    def start(desc: str, total: int):
        task = prog.add_task(desc, total=total)
        return lambda: prog.advance(task)

    return prog, start


# ---------------------------------------------------------------------------------------------
# analyze / collect


@app.command()
def analyze(
    inputs: List[Path] = typer.Argument(..., help=".nsys-rep, .sqlite, nsys parquetdir, probe dumps (.xsp or a folder of them), or a run folder"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="run dataset folder (default: RUN beside the first input, named after it)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of the summary"),
    nsys: Optional[str] = typer.Option(None, "--nsys", help="nsys binary for .nsys-rep inputs"),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="calibration JSON (from calibrate fit) for ρ, q and the guard"),
    allow_overflow: bool = typer.Option(False, "--allow-overflow", help="accept probe dumps whose buffers overflowed (dropped records are reported)"),
):
    """Collect, align and analyze; write the run dataset and print a summary."""
    from xstage_trace.runner import analyze_inputs

    prog, start = _progress(not as_json)
    if prog:
        prog.start()
    try:
        summary = analyze_inputs(inputs, output, nsys=nsys, calibration=calibration, allow_overflow=allow_overflow, progress=start)
    finally:
        if prog:
            prog.stop()
    if as_json:
        _emit(summary)
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


# ---------------------------------------------------------------------------------------------
# calibrate


@calibrate_app.command("fit")
def calibrate_fit(
    measurements: Path = typer.Argument(..., help="CSV/Parquet of calibration points, a run folder, or a folder of calibration dumps"),
    dest: Optional[str] = typer.Option(None, "--dest", help="store path to fit (host, local, peer); required when the input holds several"),
    as_json: bool = typer.Option(False, "--json"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write the calibration JSON here"),
    platform: str = typer.Option("", "--platform", help="platform name recorded in the JSON (default: the GPU of the dumps)"),
):
    """Fit M_X (spec §3) and predict the whole sweep with no refit."""
    from xstage_trace.runner import fit_measurements

    doc = fit_measurements(measurements, dest, output, platform)
    if as_json:
        _emit(doc)
        return
    t = Table(title=f"M_X fit: {doc['platform']} {doc['store_path']}", show_header=False)
    if doc["rate_points"]:
        t.add_row("R", f"{doc['rate_gbps']:.1f} ± {doc['rate_uncertainty_gbps'] or 0:.1f} GB/s ({doc['rate_points']} drain-limited points)")
    else:
        t.add_row("R", f">= {doc['rate_gbps']:.0f} GB/s (lower bound: no drain-limited zero-gap launch)")
    t.add_row("Q", "n/a: " + str(doc["capacity_reason"]) if doc["capacity_bytes"] is None else ", ".join(f"K={k}: {v / 2**20:.2f} MiB" for k, v in doc["capacity_by_producers_bytes"].items()) + f" ({doc['capacity_source']})")
    t.add_row("loop overhead", f"{doc['loop_overhead_ns']:.0f} ns")
    if doc["period_err_median_pct"] is not None:
        t.add_row("period error (recurrence)", f"median {doc['period_err_median_pct']:.2f} %, mean {doc['period_err_mean_pct']:.2f} %")
    ss = doc["errors_steady_state"]
    if ss:
        t.add_row("period error (Eq. 1 only)", f"median {ss['period_err_median_pct']:.2f} %, mean {ss['period_err_mean_pct']:.2f} %")
    t.add_row("points", str(doc["points"]))
    out.print(t)
    if output:
        out.print(f"wrote {output}")


@calibrate_app.command("run")
def calibrate_run(
    dest: str = typer.Option(..., "--dest", help="host | local | peer"),
    output: Path = typer.Option(..., "-o", "--output", help="folder for dumps, run dataset, calibration JSON and report"),
    quick: bool = typer.Option(False, "--quick", help="a small sweep (seconds)"),
    binary: Optional[Path] = typer.Option(None, "--binary", help="a built burst_gap (with -DXSTAGE_TRACE); default: build it with nvcc"),
    nvcc: str = typer.Option("nvcc", "--nvcc"),
    device: int = typer.Option(0, "--device", help="GPU that runs the producers"),
    peer: Optional[int] = typer.Option(None, "--peer", help="GPU that holds the buffer for --dest peer (default: the other of 0/1)"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Build and run the calibration benchmark on this machine's GPU, then collect and fit."""
    from xstage_trace.runner import run_calibration

    doc = run_calibration(dest, output, quick=quick, binary=binary, nvcc=nvcc, device=device, peer=peer)
    if as_json:
        _emit(doc)
    else:
        out.print(f"R = {doc['rate_gbps']:.1f} GB/s, Q = {doc['capacity_bytes']}, report: {output / ('report_' + doc['store_path'] + '.md')}")


# ---------------------------------------------------------------------------------------------
# instrument


@instrument_app.command("flags")
def instrument_flags(trace: bool = typer.Option(True, "--trace/--no-trace", help="probes compiled in (default) or out")):
    """Print the nvcc flags that put the probes into a build (-I and -D), and the include folder."""
    from xstage_trace.instrument import include_dir

    inc = include_dir()
    flags = f"-I{inc}" + (" -DXSTAGE_TRACE=1" if trace else "")
    out.print(flags, highlight=False, soft_wrap=True)
    err.print(f"include folder: {inc}   (#include <xstage/probe.cuh>, host side <xstage/host.hpp>)")


# ---------------------------------------------------------------------------------------------
# model


@model_app.command("burst")
def model_burst(
    rate_gbps: float = typer.Option(..., "--rate-gbps"),
    issue_floor_us: float = typer.Option(..., "--issue-floor-us"),
    producers: int = typer.Option(..., "--producers"),
    bytes_per_producer: float = typer.Option(..., "--bytes-per-producer"),
    gap_us: Optional[float] = typer.Option(None, "--gap-us"),
    capacity_mib: Optional[float] = typer.Option(None, "--capacity-mib"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Burst–Gap law for one recurring burst (spec §2–§4)."""
    from xstage_trace.model_cli import burst_doc

    _show(burst_doc(rate_gbps, issue_floor_us, producers, bytes_per_producer, gap_us, capacity_mib), as_json, "burst")


@model_app.command("stall")
def model_stall(
    span_us: Optional[float] = typer.Option(None, "--span-us"),
    cover_us: Optional[float] = typer.Option(None, "--cover-us"),
    tiles: Optional[Path] = typer.Option(None, "--tiles", help="CSV/Parquet with span_us (or rs_span_ns) and cover_us (or cover_ns) columns, optional group columns"),
    by: Optional[str] = typer.Option(None, "--by", help="comma-separated columns to summarize by"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Predicted MMA stall Δt = [T_RS − T_cover]₊ (spec §5), for one tile or a table of tiles."""
    from xstage_trace.model_cli import stall_doc

    _show(stall_doc(span_us, cover_us, tiles, by), as_json, "stall")


@model_app.command("qloop")
def model_qloop(
    tile_m: int = typer.Option(128, "--tile-m"),
    head_dim: int = typer.Option(128, "--head-dim"),
    elem_bytes: int = typer.Option(2, "--elem-bytes"),
    kv_tile: int = typer.Option(128, "--kv-tile"),
    sigma_us: float = typer.Option(..., "--sigma-us"),
    producers: int = typer.Option(..., "--producers"),
    rate_gbps: float = typer.Option(..., "--rate-gbps"),
    issue_floor_us: float = typer.Option(..., "--issue-floor-us"),
    capacity_mib: Optional[float] = typer.Option(None, "--capacity-mib"),
    seq_len: List[int] = typer.Option([8192], "--seq-len", "-M"),
    as_json: bool = typer.Option(False, "--json"),
):
    """FlashAttention–All-to-All piggyback audit (spec §7)."""
    from xstage_trace.model_cli import qloop_doc

    _show(qloop_doc(tile_m, head_dim, elem_bytes, kv_tile, sigma_us, producers, rate_gbps, issue_floor_us, capacity_mib, seq_len), as_json, "qloop")


@model_app.command("interleave")
def model_interleave(
    volume_bytes: float = typer.Option(..., "--volume-bytes"),
    mainloop_l1_us: float = typer.Option(..., "--mainloop-l1-us"),
    mainloop_l2_us: float = typer.Option(..., "--mainloop-l2-us"),
    n1: int = typer.Option(..., "--n1"),
    n2: int = typer.Option(..., "--n2"),
    issue_floor_us: float = typer.Option(..., "--issue-floor-us"),
    rate_gbps: float = typer.Option(..., "--rate-gbps"),
    n_tile_width: Optional[int] = typer.Option(None, "--n-tile-width"),
    num_sms: Optional[int] = typer.Option(None, "--num-sms"),
    expert_intermediate: Optional[int] = typer.Option(None, "--expert-intermediate"),
    as_json: bool = typer.Option(False, "--json"),
):
    """MegaMoE expert-wave vs interleaved schedule (spec §6)."""
    from xstage_trace.model_cli import interleave_doc

    _show(interleave_doc(volume_bytes, mainloop_l1_us, mainloop_l2_us, n1, n2, issue_floor_us, rate_gbps, n_tile_width, num_sms, expert_intermediate), as_json, "interleave")


@model_app.command("partition")
def model_partition(
    tokens_per_expert: str = typer.Option(..., "--tokens-per-expert", help="comma-separated M_e"),
    tokens: int = typer.Option(..., "--tokens"),
    hidden: int = typer.Option(..., "--hidden"),
    reduction: int = typer.Option(..., "--reduction"),
    splits: int = typer.Option(..., "--splits"),
    ranks: int = typer.Option(..., "--ranks"),
    tile_m: int = typer.Option(128, "--tile-m"),
    tile_n: int = typer.Option(128, "--tile-n"),
    num_sms: int = typer.Option(108, "--num-sms"),
    rho: Optional[float] = typer.Option(None, "--rho", help="measured service-time ratio (default: ρ_ref scaled, spec §9)"),
    as_json: bool = typer.Option(False, "--json"),
):
    """CTA partition for GEMM2+GatherRS (spec §9): T(C) for every legal C and C*."""
    from xstage_trace.model_cli import partition_doc

    _show(partition_doc(tokens_per_expert, tokens, hidden, reduction, splits, ranks, tile_m, tile_n, num_sms, rho), as_json, "partition")


@model_app.command("sequence")
def model_sequence(
    bursts: Path = typer.Argument(..., help="CSV/Parquet with volume_bytes and gap_ns (optional issue_floor_ns, producers) per burst, or a run folder"),
    calibration: Optional[Path] = typer.Option(None, "--calibration"),
    rate_gbps: Optional[float] = typer.Option(None, "--rate-gbps"),
    issue_floor_us: Optional[float] = typer.Option(None, "--issue-floor-us"),
    capacity_mib: Optional[float] = typer.Option(None, "--capacity-mib"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Backlog recurrence and capacity guard over a burst sequence (spec §4)."""
    from xstage_trace.model_cli import sequence_doc

    _show(sequence_doc(bursts, calibration, rate_gbps, issue_floor_us, capacity_mib), as_json, "sequence")


def _show(doc: dict, as_json: bool, title: str) -> None:
    if as_json:
        _emit(doc)
        return
    t = Table(title=f"model {title}", show_header=False)
    for k, v in doc.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            v = f"{len(v)} rows (use --json)"
        t.add_row(k, json.dumps(v, default=json_default) if isinstance(v, (dict, list)) else str(v))
    out.print(t)


def main() -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2 (usage errors too)."""
    try:
        app()
    except InputError as exc:
        err.print(f"xstage-trace: error: {exc.one_line()}", highlight=False, soft_wrap=True)
        sys.exit(2)
