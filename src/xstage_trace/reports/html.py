"""One self-contained, offline report.html: the report sections with the plotly figures embedded
and plotly.js inlined once (no network access needed to open it)."""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from xstage_trace.reports.markdown import fmt

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f3f3f3}.scope{color:#555;font-style:italic}details{margin:.5em 0}code{background:#f3f3f3;padding:0 3px}"""


def _inline(text: str) -> str:
    """Escape a Markdown text line and keep its **bold** and `code` marks."""
    t = html.escape(text.lstrip("-> ").strip())
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def _table(df) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(v))}</td>" for v in row) + "</tr>" for row in df.itertuples(index=False, name=None))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def render_html(title: str, sections, figures: dict[str, go.Figure]) -> str:
    """The report as one HTML document; ``figures`` (stem → plotly figure) are placed in the
    sections that name them."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    for sec in sections:
        body.append(f"<h2>{html.escape(sec.title)}</h2>")
        if sec.scope:
            body.append(f'<p class="scope">Timing scope: {html.escape(sec.scope)}.</p>')
        items = [f"<li>{_inline(t)}</li>" if t.startswith("- ") else f"<p>{_inline(t)}</p>" for t in sec.text]
        body += items
        if sec.table is not None and len(sec.table):
            t = _table(sec.table)
            body.append(f"<details><summary>{html.escape(sec.title)}: {len(sec.table)} rows</summary>{t}</details>" if sec.details else t)
        for stem in sec.figures:
            if stem in figures:
                body.append(figures[stem].to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{stem}"))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{_STYLE}</style>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>{''.join(body)}</body></html>")
