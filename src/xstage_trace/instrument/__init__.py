"""xstage-trace instrument: CUDA probe headers (package data) and the calibration benchmark sources."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def include_dir() -> Path:
    """Folder to pass with -I so that ``#include <xstage/probe.cuh>`` resolves."""
    return _HERE / "include"


def bench_source(name: str = "burst_gap.cu") -> Path:
    """Path of a benchmark source shipped with the package."""
    return _HERE / "bench" / name
