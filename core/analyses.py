"""The analyses ``analyze`` runs over a collected run, as a registry of small stateless steps.

In the manner of HTA's analyzers: each step takes the run's tables (pandas) plus what earlier steps
produced and returns one DataFrame. ``run_analyses`` runs them in order; the runner writes what they
return (``bursts`` and ``tiles`` as run-dataset tables, ``table3`` as ``table3.parquet``,
``calibration_points`` as ``calibration_points.csv``). Adding an analysis is adding an entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.base.schema import CONFIG_COLUMNS


@dataclass(frozen=True)
class AnalysisContext:
    """What the analyses need beyond the tables: the calibrated platform, the noise floor, warm-ups."""

    model: PlatformModel | None = None
    noise_ns: float | None = None
    warmup_launches: int = 0

    def __post_init__(self):
        if self.warmup_launches < 0:
            raise ValueError("warmup_launches must be >= 0")
        if self.noise_ns is not None and not self.noise_ns >= 0:
            raise ValueError("noise_ns must be >= 0")


@dataclass(frozen=True)
class Analysis:
    """One registered step: its output name and the function producing it."""

    name: str
    run: Callable[[dict[str, pd.DataFrame], AnalysisContext], pd.DataFrame]


def _with_config(frame: pd.DataFrame, dumps: pd.DataFrame) -> pd.DataFrame:
    """Copy the configuration columns of each row's dump onto ``frame``."""
    if frame.empty:
        return frame
    cfg = dumps[["rank", "dump", *CONFIG_COLUMNS]].astype({"dump": str})
    return frame.drop(columns=[c for c in CONFIG_COLUMNS if c in frame]).merge(cfg, on=["rank", "dump"], how="left")


def _calibration_points(t: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.calibration_points import calibration_points

    return calibration_points(t["probes"], t["probe_slices"], t["dumps"])


def _bursts(t: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.bursts import audit_bursts, reconstruct_bursts, remote_store_spans

    return _with_config(audit_bursts(reconstruct_bursts(remote_store_spans(t["probes"])), ctx.model), t["dumps"])


def _tiles(t: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.tiles import tile_table

    return tile_table(t["probes"], t["dumps"], ctx.noise_ns)


def _table3(t: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.stall import attach_kernel_times, kernel_trials, table3_from_tiles

    if t["tiles"].empty:
        return pd.DataFrame()
    trials = kernel_trials(t["kernels"], t["dumps"], ctx.warmup_launches)
    return attach_kernel_times(table3_from_tiles(t["tiles"]), trials)


ANALYSES: tuple[Analysis, ...] = (
    Analysis("calibration_points", _calibration_points),
    Analysis("bursts", _bursts),
    Analysis("tiles", _tiles),
    Analysis("table3", _table3),
)


def run_analyses(tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    """Run every registered analysis in order over the run's tables; later steps see earlier results."""
    out: dict[str, pd.DataFrame] = {}
    if tables["probes"].empty:
        return out
    view = dict(tables)
    for a in ANALYSES:
        out[a.name] = view[a.name] = a.run(view, ctx)
    return out
