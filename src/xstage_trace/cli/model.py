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
    as_json: bool = typer.Option(False, "--json"),
):
    """CTA partition for GEMM2+GatherRS (docs/model.md §9): T(C) for every legal C and C*."""
    from xstage_trace.pipeline.model_eval import partition_doc

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
    """Backlog recurrence and capacity guard over a burst sequence (docs/model.md §4)."""
    from xstage_trace.pipeline.model_eval import sequence_doc

    _show(sequence_doc(bursts, calibration, rate_gbps, issue_floor_us, capacity_mib), as_json, "sequence")


def _show(doc: dict, as_json: bool, title: str) -> None:
    if as_json:
        emit(doc)
        return
    from rich.table import Table

    t = Table(title=f"model {title}", show_header=False)
    for k, v in doc.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            v = f"{len(v)} rows (use --json)"
        t.add_row(k, dumps(v) if isinstance(v, (dict, list)) else str(v))
    out.print(t)
