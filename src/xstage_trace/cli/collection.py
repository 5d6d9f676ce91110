"""``xstage-trace collection ROOT...``: many run folders as one dataset (DuckDB)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from xstage_trace.cli import app, emit, out


class Query(str, Enum):
    table3 = "table3"
    worst = "worst"
    calibration_drift = "calibration-drift"
    runs = "runs"
    sql = "sql"


@app.command()
def collection(
    roots: List[Path] = typer.Argument(..., help="run folders, or folders holding them (searched recursively), and calibration JSONs"),
    query: Query = typer.Option(Query.table3, "--query", "-q", help="table3: Table 3 of every run; worst: configurations by backpressured tiles; "
                                "calibration-drift: M_X fits and calibration points over time; runs: one row per run; sql: --sql over the views"),
    sql: Optional[str] = typer.Option(None, "--sql", help="DuckDB SQL for --query sql (views: runs, table3, tiles, bursts, kernels, nvtx, gpu_metrics, "
                                      "probes, probe_slices, calibration_points, calibrations; each with a run column)"),
    limit: int = typer.Option(20, "--limit", help="rows of --query worst"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
):
    """Treat many run folders as one dataset: Table 3 across runs, the worst backpressured
    configurations, calibration drift over time, or any SQL (DuckDB)."""
    from xstage_trace.base.errors import InputError
    from xstage_trace.dataset.collection import open_collection

    if (query is Query.sql) != (sql is not None):
        raise InputError(None, "--sql goes with --query sql, and --query sql needs --sql", "pass both, or neither")
    c = open_collection(roots)
    if query is Query.calibration_drift:
        frames = {"calibrations": c.calibration_drift(), "points": c.point_drift()}
    else:
        frames = {"rows": {Query.table3: c.table3, Query.worst: lambda: c.worst(limit), Query.runs: c.runs,
                           Query.sql: lambda: c.sql(sql)}[query]()}
    if as_json:
        emit({"query": query.value, "runs": len(c.run_dirs), **{k: _records(f) for k, f in frames.items()}})
        return
    for name, frame in frames.items():
        if query is Query.worst and frame[["dest", "shape", "schedule"]].notna().all(axis=None):
            frame = frame.drop(columns=["configuration"])  # the full label is in --json
        _print_frame(frame, f"{query.value}{'' if name == 'rows' else ': ' + name} ({len(c.run_dirs)} runs)")


def _records(frame) -> list[dict]:
    """Rows as JSON-ready dicts: missing values → null, times → ISO strings."""
    import pandas as pd

    frame = frame.copy()
    for col in frame.columns:
        if pd.api.types.is_datetime64_any_dtype(frame[col]):
            frame[col] = frame[col].map(lambda t: None if pd.isna(t) else t.isoformat())
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def _print_frame(frame, title: str) -> None:
    from rich.table import Table

    t = Table(title=title)
    for col in frame.columns:
        t.add_column(str(col), overflow="fold")
    for row in frame.itertuples(index=False):  # result rows (one per run/configuration), not records
        t.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    out.print(t)
