"""``xstage-trace compare``: the regression gate between a base run and a new run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from xstage_trace.cli import app, emit, out


@app.command()
def compare(
    base_run: Path = typer.Argument(..., help="baseline run folder"),
    new_run: Path = typer.Argument(..., help="run folder of the change under test"),
    gate: float = typer.Option(2.0, "--gate", help="smallest kernel-time change (%) that counts, below the noise floor it is raised to the noise"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (outcome, exit code, rows)"),
    accept: Optional[str] = typer.Option(None, "--accept", help="accept a known regression: the reason is recorded and the gate passes"),
    by: str = typer.Option("dest,shape,schedule,kernel", "--by", help="configuration keys to match the runs on (subset of dest,shape,schedule,kernel)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write compare.md here (default: nothing is written)"),
    force: bool = typer.Option(False, "--force", help="replace the -o file when it is an earlier compare.md (never anything else)"),
):
    """Per configuration: kernel-time change with a noise floor, stalls and backpressured tiles; exit 0 pass, 1 regression or inconclusive, 2 bad input."""
    from xstage_trace import open_run
    from xstage_trace.base.output import check_output, starts_with, write_output
    from xstage_trace.reports.compare import (MARKDOWN_MARK, GateConfig, check_gate, compare_markdown, compare_runs, compare_tiles, gate_outcome,
                                              kernel_change_line, verdict_changes)

    check_gate(gate, accept)
    if output is not None:
        check_output(output, inputs=[base_run, new_run], force=force, ours=starts_with(MARKDOWN_MARK), example="compare.md")
    cfg = GateConfig(gate_pct=gate, keys=tuple(k.strip() for k in by.split(",") if k.strip()))
    base, new = open_run(base_run), open_run(new_run)
    table, tiles = compare_runs(base, new, cfg), compare_tiles(base, new, cfg)
    code, outcome = gate_outcome(table, accept, tiles)
    changes = verdict_changes(base, new)
    if output is not None:
        write_output(output, compare_markdown(table, outcome, base_run, new_run, cfg, accept, tiles, changes))
    if as_json:
        emit({"outcome": outcome, "exit_code": code, "accepted": accept, "gate_pct": gate, "keys": list(cfg.keys),
              "compare_md": str(output) if output else None, "configurations": table.astype(object).where(table.notna(), None).to_dict("records"),  # NaN → null: strict JSON
              "tile_metrics": tiles.astype(object).where(tiles.notna(), None).to_dict("records")})
    else:
        out.print(outcome, highlight=False)
        out.print(kernel_change_line(table), highlight=False)
        out.print(f"{len(changes)} configuration{'s' if len(changes) != 1 else ''} changed verdict" + (":" if changes else "."), highlight=False)
        for c in changes:
            out.print(c, highlight=False)
        if output is not None:
            out.print(f"wrote {output}")
    raise typer.Exit(code)
