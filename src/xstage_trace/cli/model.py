"""``xstage-trace model ...``: the X-Stage model without a trace."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.base.jsonable import dumps
from xstage_trace.cli import app, emit, out

model_app = typer.Typer(no_args_is_help=True, help="Evaluate the X-Stage model without a trace.")
app.add_typer(model_app, name="model")



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
    """Burst–Gap law for one recurring burst (docs/model.md §2–§4)."""
    from xstage_trace.pipeline.model_eval import burst_doc

    _show(burst_doc(rate_gbps, issue_floor_us, producers, bytes_per_producer, gap_us, capacity_mib), as_json, "burst")


@model_app.command("stall")
def model_stall(
    span_us: Optional[float] = typer.Option(None, "--span-us"),
    cover_us: Optional[float] = typer.Option(None, "--cover-us"),
    tiles: Optional[Path] = typer.Option(None, "--tiles", help="CSV/Parquet with span_us (or rs_span_ns) and cover_us (or cover_ns) columns, optional group columns"),
    by: Optional[str] = typer.Option(None, "--by", help="comma-separated columns to summarize by"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Predicted MMA stall Δt = [T_RS − T_cover]₊ (docs/model.md §5), for one tile or a table of tiles."""
    from xstage_trace.pipeline.model_eval import stall_doc

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
    """FlashAttention–All-to-All piggyback audit (docs/model.md §7)."""
    from xstage_trace.pipeline.model_eval import qloop_doc

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
    """MegaMoE expert-wave vs interleaved schedule (docs/model.md §6)."""
    from xstage_trace.pipeline.model_eval import interleave_doc

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
    rho: Optional[float] = typer.Option(None, "--rho", help="measured service-time ratio (default: ρ_ref scaled, docs/model.md §9)"),
    service: Optional[Path] = typer.Option(None, "--service", help="partition_regret.json: measured compute/comm wave times per C instead of ρ"),
    service_shape: Optional[str] = typer.Option(None, "--service-shape", help="which shape's service times in --service"),
    comm_tile_n: int = typer.Option(1024, "--comm-tile-n"),
    comp_per_sm: int = typer.Option(2, "--comp-per-sm", help="o_comp: resident compute CTAs per SM"),
    comm_per_sm: int = typer.Option(1, "--comm-per-sm", help="o_comm: resident communication CTAs per SM"),
    as_json: bool = typer.Option(False, "--json"),
):
    """CTA partition for GEMM2+GatherRS (docs/model.md §9): T(C) for every legal C and C*."""
    from xstage_trace.pipeline.model_eval import partition_doc

    _show(partition_doc(tokens_per_expert, tokens, hidden, reduction, splits, ranks, tile_m, tile_n, num_sms, rho,
                        service, service_shape, comm_tile_n, comp_per_sm, comm_per_sm), as_json, "partition")


@model_app.command("partition-sweep")
def model_partition_sweep(
    folder: Path = typer.Argument(..., help="a gather_rs_moe C-sweep folder (device_partition.sh's res/: times, workloads, calibration probes), "
                                            "or a partition_regret.json it wrote (shown as is)"),
    dest: str = typer.Option("host", "--dest", help="host | local: which destination's sweep"),
    max_comm_ctas: int = typer.Option(16, "--max-comm-ctas", help="the legal domain C = 1 … this"),
    n_boot: int = typer.Option(2000, "--n-boot", help="bootstrap replicates of the speedup over the best fixed C"),
    write: Optional[Path] = typer.Option(None, "--write", help="also write the document as JSON here (partition_regret.json)"),
    report: Optional[Path] = typer.Option(None, "-o", "--output", help="also write the Markdown report here (FILE.md)"),
    force: bool = typer.Option(False, "--force", help="replace --write/-o files that are earlier partition-sweep output (never anything else)"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Measured oracle, the selector's C and its regret per workload of a C sweep (docs/model.md §9, ρ measured on a calibration run)."""
    from xstage_trace.pipeline.partition_sweep import partition_regret_doc

    if dest not in ("host", "local"):
        from xstage_trace.base.errors import InputError

        raise InputError(None, f"--dest {dest!r} is neither host nor local", "give --dest host or --dest local")
    from xstage_trace.base.output import check_outputs, contains, write_outputs

    # base/output.py: never onto the sweep or document it reads, never a user's file
    targets = check_outputs({write: contains(b'"mean_regret_pct"'), report: b"# CTA partition sweep"}, inputs=[folder], force=force)
    if folder.is_file():
        from xstage_trace.reports.partition_sweep import load_regret_doc

        doc = load_regret_doc(folder)
    else:
        doc = partition_regret_doc(folder, dest, max_comm_ctas, n_boot)
    from xstage_trace.reports.partition_sweep import render_partition_sweep

    write_outputs(targets, {write: dumps(doc) + "\n", report: render_partition_sweep(doc) if report is not None else None})
    if as_json:
        emit(doc)
        return
    from rich.table import Table

    t = Table(title=f"model partition-sweep ({dest}): mean regret {doc['mean_regret_pct']:.2f} %, max {doc['max_regret_pct']:.2f} %")
    for col in ("workload", "C oracle", "C selected", "regret %", "T oracle ms", "T selected ms"):
        t.add_column(col)
    for w in doc["workloads"]:
        t.add_row(w["workload"], str(w["c_oracle"]), str(w["c_selected"]), f"{w['regret_pct']:.2f}",
                  f"{w['times_ms'][str(w['c_oracle'])]:.3f}", f"{w['times_ms'][str(w['c_selected'])]:.3f}")
    out.print(t)
    s = doc["speedup_vs_best_fixed_c"]
    out.print(f"speedup over the best fixed C = {s['best_fixed_c']}: {s['speedup_geomean']:.4f}x "
              f"({100 * s['level']:.0f} % bootstrap interval {s['ci_low']:.4f} … {s['ci_high']:.4f})")


@model_app.command("sequence")
def model_sequence(
    bursts: Path = typer.Argument(..., help="CSV/Parquet with volume_bytes and gap_ns (optional issue_floor_ns, producers) per burst, or a run folder"),
    calibration: Optional[Path] = typer.Option(None, "--calibration"),
    rate_gbps: Optional[float] = typer.Option(None, "--rate-gbps"),
    issue_floor_us: Optional[float] = typer.Option(None, "--issue-floor-us"),
    capacity_mib: Optional[float] = typer.Option(None, "--capacity-mib"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Backlog recurrence and capacity guard over a burst sequence (docs/model.md §4)."""
    from xstage_trace.pipeline.model_eval import sequence_doc

    _show(sequence_doc(bursts, calibration, rate_gbps, issue_floor_us, capacity_mib), as_json, "sequence")


UNITS = (("_us", "µs"), ("_ns", "ns"), ("_ms", "ms"), ("_gbps", "GB/s"), ("_mib", "MiB"), ("_bytes", "bytes"),
         ("_pct", "%"), ("_tokens", "tokens"), ("_rows", "rows"))
PER_ITEM = {"per_burst": "bursts", "predicted_stall_us": "tiles"}  # one value per burst / tile: --json only
SUMMARY_FIRST = ("summary", "configurations", "verdicts", "candidates")  # the grouped answer, printed before the scalars' table


def _label(key: str) -> tuple[str, str]:
    """A key's words and its unit from the name's suffix ("drain_time_us" → "drain time", "µs")."""
    for suffix, unit in UNITS:
        if key.endswith(suffix):
            return key[: -len(suffix)].replace("_", " "), unit
    return key.replace("_", " "), ""


def _value(v, unit: str = "") -> str:
    """A number rounded to 4 significant digits (bytes also in MiB), with its unit; None → —."""
    if v is None or (isinstance(v, float) and v != v):
        return "—"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if unit == "bytes":
        return f"{v:,.0f} bytes ({v / (1 << 20):.3g} MiB)" if abs(v) >= 1 << 20 else f"{v:,.0f} bytes"
    text = f"{v:,}" if isinstance(v, int) else f"{v:,.4g}"
    return f"{text} {unit}".strip()


def _rows_table(title: str, rows: list[dict]):
    """A list of records as a table: units in the headers (ns shown as µs, bytes as MiB), cells
    rounded; the dump column left out where dest, shape and schedule name the configuration."""
    from rich.table import Table

    t = Table(title=title)
    keys = [k for k in rows[0] if not (k == "dump" and {"dest", "shape", "schedule"} <= set(rows[0]))]
    shown = []
    for k in keys:
        words, unit = _label(k)
        scale = {"ns": ("µs", 1e-3), "bytes": ("MiB", 1.0 / (1 << 20))}.get(unit, (unit, 1.0))
        shown.append((k, scale[1]))
        numeric = any(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) for r in rows)
        t.add_column(f"{words} ({scale[0]})" if scale[0] else words, justify="right" if numeric else "left")
    for r in rows:
        cells = []
        for k, scale in shown:
            v = r.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and scale != 1.0:
                v = float(v) * scale
            cells.append(_value(v))
        t.add_row(*cells)
    return t


def _show(doc: dict, as_json: bool, title: str) -> None:
    """The model's answer for a person: the grouped rows first (one per configuration or group), then
    the scalars with units, 4 significant digits; per-burst and per-tile values only under --json."""
    if as_json:
        emit(doc)
        return
    from rich.table import Table

    for key in SUMMARY_FIRST:
        rows = doc.get(key)
        if isinstance(rows, list) and rows and isinstance(rows[0], dict):
            out.print(_rows_table(f"model {title}: {key.replace('_', ' ')}", rows))
    t = Table(title=f"model {title}", show_header=False)
    for k, v in doc.items():
        if k in SUMMARY_FIRST and isinstance(v, list):
            continue
        words, unit = _label(k)
        if k in PER_ITEM and isinstance(v, list):
            t.add_row(words, f"{len(v):,} {PER_ITEM[k]}: per-{PER_ITEM[k][:-1]} values with --json")
        elif k.startswith("onset") and v is None and doc.get("sequences", 1) > 1:
            t.add_row(words, "per sequence: see the table above")
        elif isinstance(v, (dict, list)):
            t.add_row(words, dumps(v))
        else:
            t.add_row(words, _value(v, unit))
    out.print(t)
