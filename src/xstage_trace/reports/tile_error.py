"""The tile-error report (``xstage-trace tile-error RUN [-o FILE.md]``): where the per-tile stall error of a run
comes from (docs/tile-error.md), from ``Run.tile_timeline`` (each tile's slot cycle laid out by
``analysis.tile_error``), as Markdown tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from xstage_trace.analysis.tile_error import backpressured_configurations, error_breakdown, error_summary
from xstage_trace.reports.markdown import md_table

MARKDOWN_MARK = b"# Per-tile stall error: "
WORST_TILES = 15
BREAKDOWNS = (  # (title, grouping keys, Linear-2 tiles only)
    ("by tile kind", ["shape", "tile_kind"], False),
    ("by wave (Linear-2)", ["shape", "wave"], True),
    ("by position in the CTA's wave (Linear-2)", ["shape", "position_in_wave"], True),
    ("by staging slot (Linear-2)", ["shape", "slot_index"], True),
    ("by burst in the wave (Linear-2; burst k = every CTA's k-th Linear-2 tile of the wave)", ["shape", "wave", "burst_in_wave"], True),
)
WORST_COLUMNS = ["dest", "shape", "schedule", "cta", "position", "tile_kind", "wave", "burst_in_wave", "epilogue_span_ns", "cover_ns",
                 "predicted_stall_ns", "measured_stall_ns", "idle_stall_ns", "pre_wait_ns", "epilogue_lead_ns", "wake_ns", "error_ns"]


def run_timeline(run_dir: Path) -> pd.DataFrame:
    """The per-tile timeline of a run folder (``Run.tile_timeline``)."""
    import xstage_trace

    return xstage_trace.open_run(run_dir).tile_timeline()


def _table(frame: pd.DataFrame) -> str:
    return md_table(frame) if len(frame) else "_(none)_"


def render(timeline: pd.DataFrame, run_dir: Path) -> str:
    """The Markdown text: the score per stall-bound configuration, the breakdowns, the worst tiles."""
    bp = backpressured_configurations(timeline)
    l2 = bp[bp["tile_kind"] == "linear2"]
    floor_us = float(timeline["idle_floor_ns"].iloc[0]) / 1e3
    parts = [f"# Per-tile stall error: {run_dir.name}", "",
             "Timing scope: probe clock64 converted to ns per SM (µs). error = predicted − measured stall (instrumented slot wait); "
             f"idle = the MMA role's idle time before the slot's reuse less its control floor ({floor_us:.3f} µs). "
             "Stall-bound configurations only (docs/model.md §5 rule on the Linear-2 medians).", "",
             "## Score", "", _table(error_summary(timeline))]
    for title, keys, only_l2 in BREAKDOWNS:
        parts += ["", f"## Error {title}", "", _table(error_breakdown(l2 if only_l2 else bp, keys))]
    worst = bp.assign(abs_err=bp["error_ns"].abs()).nlargest(WORST_TILES, "abs_err")[WORST_COLUMNS]
    parts += ["", f"## The {WORST_TILES} tiles with the largest |error| (ns)", "", _table(worst)]
    return "\n".join(parts) + "\n"
