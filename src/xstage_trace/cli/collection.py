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
        _print_frame(frame, f"{query.value}{'' if name == 'rows' else ': ' + name} ({len(c.run_dirs)} runs)", FIRST.get(query.value))


def _records(frame) -> list[dict]:
    """Rows as JSON-ready dicts: missing values → null, times → ISO strings."""
    import pandas as pd

    frame = frame.copy()
    for col in frame.columns:
        if pd.api.types.is_datetime64_any_dtype(frame[col]):
            frame[col] = frame[col].map(lambda t: None if pd.isna(t) else t.isoformat())
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


FIRST = {  # the columns a person reads first, per query (the others follow while they fit)
    "table3": ["run", "dest", "shape", "variant", "stall_wave_meas_us", "stall_interleaved_meas_us", "backpressured_wave",
               "backpressured_interleaved", "kernel_ms_wave", "kernel_ms_interleaved", "span_wave_us", "span_interleaved_us"],
    "runs": ["run", "captured_utc", "gpus", "calibration", "inputs", "warnings", "tiles_rows", "bursts_rows"],
    "calibration-drift": ["measured_utc", "captured_utc", "run", "file", "store_path", "dest", "rate_gbps", "rate_drift_pct",
                          "capacity_drift_pct", "issue_floor_drift_pct", "points"],
}
PATH_COLUMNS = ("file", "calibration", "path")
MIN_WIDTH = 120


def _cell(col: str, v) -> str:
    """One value as a person reads it: 4 significant digits, times to the second, paths relative."""
    import pandas as pd

    from xstage_trace.base.paths import shown_path

    if v is None or (not isinstance(v, (list, tuple, str)) and pd.isna(v)):
        return "—"
    if isinstance(v, pd.Timestamp):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, float):
        return f"{v:.4g}"
    if col in PATH_COLUMNS and isinstance(v, str) and "/" in v:
        return shown_path(v)
    return str(v)


def _print_frame(frame, title: str, first: list[str] | None = None) -> None:
    """The frame as a table that fits the terminal (at least MIN_WIDTH columns): ``first`` columns
    lead, the others follow while they fit, each cell on one line; the caption names what was left
    out (all of it is in --json)."""
    from rich.table import Table

    order = [c for c in (first or []) if c in frame.columns] + [c for c in frame.columns if c not in (first or [])]
    cells = {c: [_cell(c, v) for v in frame[c].tolist()] for c in order}
    width = max(out.width or MIN_WIDTH, MIN_WIDTH)
    used, shown, left = 1, [], []
    for c in order:  # 3 characters of border and padding per column
        need = max([len(str(c))] + [len(x) for x in cells[c]]) + 3
        if used + need <= width or not shown:
            shown.append(c)
            used += need
        else:
            left.append(c)
    t = Table(title=title, caption=(f"{len(left)} more columns with --json: {', '.join(map(str, left))}" if left else None))
    for c in shown:
        t.add_column(str(c), no_wrap=True, overflow="ellipsis")
    for i in range(len(frame)):  # result rows (one per run/configuration), not records
        t.add_row(*[cells[c][i] for c in shown])
    out.print(t)
