"""A small SVG chart writer for reports (no plotting dependency): lines and markers on linear or
log axes, a legend, titled axes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


@dataclass
class Series:
    """One series: points, drawn as a line, as markers, or both."""

    label: str
    x: list[float]
    y: list[float]
    line: bool = True
    markers: bool = False
    dashed: bool = False
    color: str | None = None  # default: the palette, by series position


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    log_x: bool = False
    log_y: bool = False
    width: int = 640
    height: int = 400


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0**e for e in range(math.floor(lo), math.ceil(hi) + 1)]
    step = 10 ** math.floor(math.log10((hi - lo) / 5 or 1))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= 6:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def render(chart: Chart) -> str:
    """The chart as an SVG document."""
    ml, mr, mt, mb = 70, 160, 30, 50
    pw, ph = chart.width - ml - mr, chart.height - mt - mb
    tx = (lambda v: math.log10(v)) if chart.log_x else float
    ty = (lambda v: math.log10(v)) if chart.log_y else float
    pts = [(tx(x), ty(y)) for s in chart.series for x, y in zip(s.x, s.y)
           if (x > 0 or not chart.log_x) and (y > 0 or not chart.log_y) and math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{chart.width}" height="60"><text x="10" y="30">{escape(chart.title)}: no data</text></svg>'
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

    def px(v):
        return ml + (tx(v) - x0) / (x1 - x0) * pw

    def py(v):
        return mt + ph - (ty(v) - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{chart.width}" height="{chart.height}" font-family="sans-serif" font-size="11">',
           f'<text x="{ml}" y="18" font-size="13">{escape(chart.title)}</text>',
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>']
    for t in _ticks(x0, x1, chart.log_x):
        v = t if not chart.log_x else t
        pos = ml + ((math.log10(v) if chart.log_x else v) - x0) / (x1 - x0) * pw
        if ml - 1 <= pos <= ml + pw + 1:
            out.append(f'<line x1="{pos:.1f}" y1="{mt + ph}" x2="{pos:.1f}" y2="{mt + ph + 4}" stroke="#333"/><text x="{pos:.1f}" y="{mt + ph + 16}" text-anchor="middle">{v:g}</text>')
    for t in _ticks(y0, y1, chart.log_y):
        pos = mt + ph - ((math.log10(t) if chart.log_y else t) - y0) / (y1 - y0) * ph
        if mt - 1 <= pos <= mt + ph + 1:
            out.append(f'<line x1="{ml - 4}" y1="{pos:.1f}" x2="{ml}" y2="{pos:.1f}" stroke="#333"/><text x="{ml - 6}" y="{pos + 4:.1f}" text-anchor="end">{t:g}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{chart.height - 10}" text-anchor="middle">{escape(chart.x_label)}</text>')
    out.append(f'<text transform="translate(16,{mt + ph / 2}) rotate(-90)" text-anchor="middle">{escape(chart.y_label)}</text>')
    for i, s in enumerate(chart.series):
        color = s.color or PALETTE[i % len(PALETTE)]
        keep = [(x, y) for x, y in zip(s.x, s.y) if (x > 0 or not chart.log_x) and (y > 0 or not chart.log_y) and math.isfinite(x) and math.isfinite(y)]
        coords = [(px(x), py(y)) for x, y in sorted(keep)]
        if s.line and len(coords) > 1:
            dash = ' stroke-dasharray="5,3"' if s.dashed else ""
            out.append(f'<polyline class="series" data-label="{escape(s.label)}" fill="none" stroke="{color}" stroke-width="1.5"{dash} points="'
                       + " ".join(f"{a:.1f},{b:.1f}" for a, b in coords) + '"/>')
        if s.markers:
            out += [f'<circle class="point" data-label="{escape(s.label)}" cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{color}"/>' for a, b in coords]
        ly = mt + 12 + 14 * i
        out.append(f'<rect x="{ml + pw + 10}" y="{ly - 8}" width="10" height="10" fill="{color}"/><text x="{ml + pw + 24}" y="{ly + 1}">{escape(s.label)}</text>')
    out.append("</svg>")
    return "\n".join(out)
