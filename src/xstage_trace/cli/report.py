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
    force: bool = typer.Option(False, "--force", help="replace the -o folder when it is an earlier report folder (never anything else)"),
):
    """Write report.md (GitHub-flavoured, < 60 KB), figures/*.svg|png and a self-contained report.html."""
    from xstage_trace import open_run
    from xstage_trace.reports.run_report import write_run_report

    from xstage_trace.base.output import check_output, output_dir
    from xstage_trace.reports.run_report import is_report_dir

    dest = output or run_dir.with_name(run_dir.name + ".report")
    check_output(dest, inputs=[run_dir], force=force, kind="dir", ours=is_report_dir, example="run.report")
    run = open_run(run_dir)
    with output_dir(dest, replace=is_report_dir if force else None) as tmp:  # the whole folder in one rename
        staged = write_run_report(run, tmp, max_bytes=max_kb * 1000)
    written = {k: [dest / p.relative_to(tmp) for p in v] for k, v in staged.items()}
    if as_json:
        emit({k: [str(p) for p in v] for k, v in written.items()})
    else:
        out.print(f"wrote {written['markdown'][0]}, {written['html'][0]} and {len(written['figures'])} figure files")
