"""``xstage-trace report``: a PR-ready report of one run (Markdown, figures, offline HTML)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from xstage_trace.cli import app, emit, out


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="run folder written by xstage-trace analyze -o"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="folder for report.md, report.html and figures/ (default: RUN.report beside the run)"),
    max_kb: int = typer.Option(60, "--max-kb", help="size limit of report.md in KB (long tables are cut to fit; GitHub comments hold ~64 KB)"),
    as_json: bool = typer.Option(False, "--json", help="print the written paths as one JSON object"),
):
    """Write report.md (GitHub-flavoured, < 60 KB), figures/*.svg|png and a self-contained report.html."""
    from xstage_trace import open_run
    from xstage_trace.reports.run_report import write_run_report

    run = open_run(run_dir)
    dest = output or run_dir.with_name(run_dir.name + ".report")
    written = write_run_report(run, dest, max_bytes=max_kb * 1000)
    if as_json:
        emit({k: [str(p) for p in v] for k, v in written.items()})
    else:
        out.print(f"wrote {written['markdown'][0]}, {written['html'][0]} and {len(written['figures'])} figure files")
