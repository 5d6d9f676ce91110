"""``xstage-trace calibrate fit|run``: the platform model M_X (spec §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from xstage_trace.cli import app, emit, out

calibrate_app = typer.Typer(no_args_is_help=True, help="Calibrate the platform model M_X = (T_iss^0, R, Q).")
app.add_typer(calibrate_app, name="calibrate")



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
        emit(doc)
        return
    from rich.table import Table

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
        emit(doc)
    else:
        out.print(f"R = {doc['rate_gbps']:.1f} GB/s, Q = {doc['capacity_bytes']}, report: {output / ('report_' + doc['store_path'] + '.md')}")
