"""``xstage-trace calibrate fit|run``: the platform model M_X (docs/model.md §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from xstage_trace.cli import app, emit, out

calibrate_app = typer.Typer(no_args_is_help=True, help="Calibrate the platform model M_X = (T_iss^0, R, Q).")
app.add_typer(calibrate_app, name="calibrate")


def _err(e: dict | None) -> str:
    if not e:
        return "n/a"
    return f"median {e['period_err_median_pct']:.2f} %, mean {e['period_err_mean_pct']:.2f} %"


def _iso(e: dict | None) -> str:
    if not e:
        return "n/a (no isolated launches or no Q)"

    def part(x: dict | None) -> str:
        return "-" if x is None else f"{x['issue_err_median_pct']:.2f} / {x['issue_err_mean_pct']:.2f} %"

    return "; ".join(f"vs {name}: median / mean {part(e[key])} (within Q {part(e[key]['within_q'])}, beyond Q {part(e[key]['beyond_q'])})"
                     for key, name in (("vs_median", "median"), ("vs_p90", "p90"))) + f"; {e['points']} launches, {e['points_beyond_q']} beyond Q"


def _difference(d: dict | None) -> str:
    """The two runs' raw measurements side by side (what no no-refit prediction can beat)."""
    if not d or not d["shared_points"]:
        return "n/a (no (K, B, G) in common)"
    parts = [f"period {d['period_difference_pct']['median']:.2f} / {d['period_difference_pct']['mean']:.2f} % (median / mean, {d['shared_points']} launches)"]
    if d["floor_offset_ns"]:
        parts.append(f"recovered T_iss^0 + o offset {d['floor_offset_ns']['median']:+.0f} ns (other − this)")
    if d["drain_rate_ratio"]:
        r = d["drain_rate_ratio"]
        parts.append(f"drain-limited: |R_other / R_this − 1| {r['period_err_bound_median_pct']:.2f} / {r['period_err_bound_mean_pct']:.2f} % ({r['launches']} launches)")
    return "; ".join(parts)


def _mib(x: float | None) -> str:
    return "n/a" if x is None else f"{x / 2**20:.2f}"


def _fit_table(doc: dict):
    """The fit as a rich table (rich imported here: --json never loads it)."""
    from rich.table import Table

    from xstage_trace.collectors.calibration_io import EQ1_LINE, RECURRENCE_LINE, calibration_name, store_of_document

    t = Table(title=f"M_X fit: {doc['platform']} {doc['store_path']}, store {store_of_document(doc)}", show_header=False)
    if doc["rate_points"]:
        per_k = ", ".join(f"K={k}: {m['rate_gbps']:.1f} ± {m['uncertainty_gbps']:.1f}" + (" (own)" if m["differs"] else " (pooled used)")
                          for k, m in doc["rate_measured_by_producers"].items())
        t.add_row("R", f"{doc['rate_gbps']:.1f} ± {doc['rate_uncertainty_gbps'] or 0:.1f} GB/s pooled ({doc['rate_points']} drain-limited points)")
        t.add_row("R(K)", per_k + " GB/s")
        t.add_row("R(K, B) used", ", ".join(f"{kb}: {m['rate_gbps']:.1f} ± {m['uncertainty_gbps']:.1f}"
                                             for kb, m in (doc.get("rate_measured_by_configuration") or {}).items()) + " GB/s")
    else:
        t.add_row("R", f">= {doc['rate_gbps']:.0f} GB/s (lower bound: no drain-limited launch)")
    if doc["capacity_bytes"] is None:
        t.add_row("Q", "n/a: " + str(doc["capacity_reason"]))
    else:
        for k, c in doc["capacity_estimates"].items():
            iv = c["interval_bytes"]
            t.add_row(f"Q(K={k})", f"{_mib(c['q_bytes'])} MiB" + (f" [{_mib(iv[0])}, {_mib(iv[1])}]" if iv else "") + f" ({c['source']})")
    t.add_row("loop overhead o", f"{doc['loop_overhead_ns']:.0f} ns")
    pe = doc["period_errors"]
    t.add_row(f"period error, {RECURRENCE_LINE}", _err(pe.get("recurrence")))
    t.add_row(f"period error, {EQ1_LINE}", _err(pe.get("eq1_loop_overhead")))
    t.add_row("isolated law max(T_iss^0, (V-Q)/R)", _iso(doc["isolated_law"]))
    v = doc.get("validation")
    if v:
        ve, vs = v["period_errors"], v["period_errors_shared_configurations"]
        name = f"{v['input']['name']} {calibration_name(v)}"
        t.add_row(f"other run {name}, {RECURRENCE_LINE}", _err(ve.get("recurrence")) + f" ({v['periodic_points']} points)")
        t.add_row(f"other run {name}, {EQ1_LINE}", _err(ve.get("eq1_loop_overhead")))
        t.add_row(f"  shared (K, B, G) only, {RECURRENCE_LINE}", _err(vs.get("recurrence")) + f" ({v['shared_points']} points)")
        t.add_row(f"  shared (K, B, G) only, {EQ1_LINE}", _err(vs.get("eq1_loop_overhead")))
        t.add_row("other run, isolated law", _iso(v["isolated_law"]))
        t.add_row("  measured difference, same (K, B, G)", _difference(v.get("measured_difference")))
    d, c = doc.get("drain"), doc.get("load_coupling")
    if d:
        t.add_row("drain rate R (§11)", f"{d['rate_gbps']:.2f} GB/s ({d['rate_source']}); sustained stores {d['sustained_gbps']:.2f}, copy engine {d['copy_engine_gbps']:.2f}")
        t.add_row("accepted-ahead Q (§11)", f"{_mib(d['capacity_bytes'])} MiB [{_mib(d['capacity_interval_bytes'][0])}, {_mib(d['capacity_interval_bytes'][1])}]")
        t.add_row("load coupling (§11)", f"λ {c['load_latency_ns']:.0f} ns, load rate {c['load_rate_gbps']:.0f} GB/s")
    t.add_row("points", str(doc["points"]))
    return t


@calibrate_app.command("fit")
def calibrate_fit(
    measurements: Path = typer.Argument(..., help="CSV/Parquet of calibration points, a run folder, or a folder of calibration dumps"),
    dest: Optional[str] = typer.Option(None, "--dest", help="store path to fit (host, local, peer); required when the input holds several"),
    store: Optional[str] = typer.Option(None, "--store", help="store instruction to fit (stg, bulk, tensor2d; points without a store column are stg); required when the store path's points hold several"),
    as_json: bool = typer.Option(False, "--json"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write the calibration JSON here"),
    platform: str = typer.Option("", "--platform", help="platform name recorded in the JSON (default: the GPU of the dumps)"),
    validate: Optional[Path] = typer.Option(None, "--validate", help="another run's points (same forms as MEASUREMENTS): predict them with this fit, no refit"),
    validate_dest: Optional[str] = typer.Option(None, "--validate-dest", help="store path of the --validate points (default: the fitted one)"),
    validate_store: Optional[str] = typer.Option(None, "--validate-store", help="store instruction of the --validate points (default: the fitted one)"),
    force: bool = typer.Option(False, "--force", help="replace the -o file when it is an earlier calibration JSON (never anything else)"),
    path_drain: Optional[Path] = typer.Option(None, "--path-drain", help="the path-drain bench's folder (ramp/, load/, meta/ from device_path_drain.sh): add the drain rate, capacity and load coupling (docs/model.md §11)"),
):
    """Fit M_X (docs/model.md §3), predict the whole sweep with no refit, optionally another run's sweep (--validate)."""
    from xstage_trace.pipeline.runner import fit_measurements

    doc = fit_measurements(measurements, dest, output, platform, validate, validate_dest, force=force, store=store, validate_store=validate_store, path_drain=path_drain)
    if as_json:
        emit(doc)
        return
    out.print(_fit_table(doc))
    if output:
        out.print(f"wrote {output}")


@calibrate_app.command("run")
def calibrate_run(
    dest: str = typer.Option(..., "--dest", help="host | local | peer"),
    store: str = typer.Option("stg", "--store", help="store instruction: stg (st.global from registers) | bulk (cp.async.bulk from shared memory) | tensor2d (cp.async.bulk.tensor.2d tiles of a 7168-column output)"),
    output: Path = typer.Option(..., "-o", "--output", help="folder for dumps, run dataset, calibration JSON and report"),
    quick: bool = typer.Option(False, "--quick", help="a small sweep (seconds)"),
    binary: Optional[Path] = typer.Option(None, "--binary", help="a built burst_gap (with -DXSTAGE_TRACE); default: build it with nvcc"),
    nvcc: str = typer.Option("nvcc", "--nvcc"),
    device: int = typer.Option(0, "--device", help="GPU that runs the producers"),
    peer: Optional[int] = typer.Option(None, "--peer", help="GPU that holds the buffer for --dest peer (default: the other of 0/1)"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Build and run the calibration benchmark on this machine's GPU, then collect and fit."""
    from xstage_trace.pipeline.runner import run_calibration
    from xstage_trace.reports.calibration import write_calibration_report

    doc, points = run_calibration(dest, output, quick=quick, binary=binary, nvcc=nvcc, device=device, peer=peer, store=store)
    write_calibration_report(output, doc, points)
    if as_json:
        emit(doc)
    else:
        from xstage_trace.collectors.calibration_io import calibration_name

        out.print(f"R = {doc['rate_gbps']:.1f} GB/s, Q = {doc['capacity_bytes']}, report: {output / ('report_' + calibration_name(doc) + '.md')}")
