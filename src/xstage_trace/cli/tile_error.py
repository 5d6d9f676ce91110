"""``xstage-trace tile-error``: where the per-tile stall error of a run comes from (docs/tile-error.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from xstage_trace.cli import app, out


@app.command("tile-error")
def tile_error(
    run_dir: Path = typer.Argument(..., help="run folder written by xstage-trace analyze"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write the Markdown here (default: print it)"),
    force: bool = typer.Option(False, "--force", help="replace the -o file when it is an earlier tile-error report (never anything else)"),
):
    """Each stall-bound configuration's per-tile error (predicted − measured slot stall) split by tile kind, wave, position, slot and burst."""
    from xstage_trace import open_run
    from xstage_trace.base.output import check_output, starts_with, write_output
    from xstage_trace.reports.tile_error import MARKDOWN_MARK, render

    if output is not None:
        check_output(output, inputs=[run_dir], force=force, ours=starts_with(MARKDOWN_MARK), example="tile_error.md")
    text = render(open_run(run_dir).tile_timeline(), run_dir)
    if output is None:
        out.print(text, markup=False, highlight=False, soft_wrap=True)
        return
    write_output(output, text)
    out.print(f"wrote {output}")
