"""``xstage-trace report``: report.md + figures (SVG, PNG) + report.html for one run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from xstage_trace.base.atomic import write_text_atomic


def _figures(run, sections):
    """(matplotlib figures, plotly figures) by stem, for the stems the sections name."""
    from xstage_trace.reports import figures as F
    from xstage_trace.reports import interactive as I
    from xstage_trace.reports.configs import config_names, run_trials, slowest_rank_trials
    from xstage_trace.reports.verdict_text import verdict_table

    wanted = {f for s in sections for f in s.figures}
    static, live = {}, {}
    tiles = run.tiles()
    if "stall" in wanted:
        v = verdict_table(run)
        static["stall"], live["stall"] = F.stall_figure(v), I.stall_plot(v)
    if "kernel_time" in wanted:
        t = slowest_rank_trials(run_trials(run))
        static["kernel_time"], live["kernel_time"] = F.kernel_time_figure(t), I.kernel_time_plot(t)
    if "tile_stall" in wanted:
        static["tile_stall"], live["tile_stall"] = F.tile_stall_figure(tiles), I.tile_stall_plot(tiles)
    if "bursts" in wanted:
        b = run.bursts()
        slices = run.probe_slices().drop_duplicates("dump")
        labels = pd.Series(config_names(slices["label"]).to_numpy(), index=slices["dump"].to_numpy())
        static["bursts"], live["bursts"] = F.burst_figure(b), I.burst_plot(b, labels)
    return static, live


REPORT_FILES = ("report.md", "report.html", "figures")
MARKDOWN_MARK = b"# xstage-trace report"


def is_report_dir(path: str | Path) -> bool:
    """True for a folder ``write_run_report`` wrote: report.md (its heading), report.html and figures/
    of SVG and PNG files, nothing else (``report --force`` replaces only such a folder)."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return False
    try:
        names = {p.name for p in path.iterdir()}
        figures = list((path / "figures").iterdir()) if (path / "figures").is_dir() else []
        with open(path / "report.md", "rb") as fh:
            head = fh.read(len(MARKDOWN_MARK))
    except OSError:
        return False
    return (names <= set(REPORT_FILES) and head == MARKDOWN_MARK and not (path / "figures").is_symlink()
            and all(f.is_file() and not f.is_symlink() and f.suffix in (".svg", ".png") for f in figures))


def write_run_report(run, out_dir: str | Path, max_bytes: int = 60_000) -> dict[str, list[Path]]:
    """Write ``report.md``, ``figures/<stem>.svg|png`` and ``report.html`` into ``out_dir`` (each
    file through a temporary file); report.md stays under ``max_bytes``. Returns the paths by kind."""
    from xstage_trace.reports.content import build_sections
    from xstage_trace.reports.figures import save_figure
    from xstage_trace.reports.html import render_html
    from xstage_trace.reports.markdown import render_markdown

    out_dir = Path(out_dir)
    sections = build_sections(run)
    title = f"xstage-trace report: {run.path.name}"
    md = render_markdown(title, sections, max_bytes=max_bytes)  # first: a report that cannot fit fails before anything is written
    static, live = _figures(run, sections)
    figs = [p for stem, fig in static.items() for p in save_figure(fig, out_dir / "figures", stem)]
    write_text_atomic(out_dir / "report.md", md)
    write_text_atomic(out_dir / "report.html", render_html(title, sections, live))
    return {"markdown": [out_dir / "report.md"], "html": [out_dir / "report.html"], "figures": figs}
