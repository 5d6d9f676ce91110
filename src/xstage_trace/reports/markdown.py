"""GitHub-flavoured Markdown for report sections: fits a PR comment and a job summary."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

MAX_BYTES = 60_000


def fmt(v) -> str:
    """A table cell: integers as is, floats to 3 significant digits (no exponent below 1e6)."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return ""
    if isinstance(v, (bool,)) or type(v).__name__ == "bool_":
        return "yes" if v else "no"
    if isinstance(v, float):
        a = abs(v)
        if a == 0 or 1e-3 <= a < 1e6:
            return f"{v:.3g}" if a < 100 else f"{v:.1f}" if a < 1e3 else f"{v:.0f}"
        return f"{v:.3g}"
    return str(v).replace("|", "\\|")


def md_table(df: pd.DataFrame) -> str:
    """A GitHub pipe table."""
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False, name=None)]
    return "\n".join([head, rule] + body)


def render_section(sec, figure_dir: str = "figures") -> str:
    """One section as Markdown; long tables fold into <details>."""
    out = [f"## {sec.title}", ""]
    if sec.scope:
        out += [f"_Timing scope: {sec.scope}._", ""]
    out += list(sec.text) + ([""] if sec.text else [])
    if sec.table is not None and len(sec.table):
        table = md_table(sec.table)
        out += ([f"<details><summary>{sec.title}: {len(sec.table)} rows</summary>", "", table, "", "</details>"] if sec.details else [table]) + [""]
    out += [f"![{f}]({figure_dir}/{f}.svg)" for f in sec.figures] + ([""] if sec.figures else [])
    return "\n".join(out)


def render_markdown(title: str, sections, figure_dir: str = "figures", max_bytes: int = MAX_BYTES) -> str:
    """The whole report; folded tables are cut (worst rows kept, a note says so) until it fits ``max_bytes``."""
    sections = [dataclasses.replace(s) for s in sections]  # cutting rows must not touch the caller's sections
    full = {id(s): len(s.table) for s in sections if s.table is not None}
    notes = {id(s): list(s.text) for s in sections}
    while True:
        text = f"# {title}\n\n" + "\n".join(render_section(s, figure_dir) for s in sections)
        if len(text.encode()) <= max_bytes:
            return text
        longest = max((s for s in sections if s.details and s.table is not None and len(s.table) > 1), key=lambda s: len(s.table), default=None)
        if longest is None:
            raise ValueError(f"report is {len(text.encode())} bytes even with every long table cut")
        longest.table = longest.table.head(len(longest.table) // 2)
        longest.text = notes[id(longest)] + [f"(cut to the first {len(longest.table)} of {full[id(longest)]} rows to fit {max_bytes // 1000} KB; report.html has them all)"]
