"""Shared fixtures: real captures in sample_traces/ (and ../shared/reference_traces when present)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
REFERENCE = SAMPLES / "h200_burst_gap_reference"
CALIB = SAMPLES / "h200_calibration"
FUSED = SAMPLES / "h200_fused_moe"
SHARED = ROOT.parent / "shared" / "reference_traces"


def reference_sqlite() -> Path:
    """The H200 Burst–Gap export (cache-named beside its report)."""
    return next(REFERENCE.glob("h200_burst_gap_quick.nsys-rep.*.sqlite"))


def mock_sqlite() -> Path:
    """nsys-ai's RTX 3080 export (shared reference traces)."""
    p = SHARED / "nsys-ai_mock.sqlite"
    if not p.exists():
        pytest.skip("shared/reference_traces is not beside this checkout")
    return p


def run_sql(db: Path, *statements: str) -> Path:
    """Apply SQL statements to a SQLite file (to break a copy of a real export on purpose)."""
    con = sqlite3.connect(db)
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()
    return db


@pytest.fixture
def tmp_copy(tmp_path):
    """Copy a file into tmp_path and return the copy."""

    def _copy(src: Path, name: str | None = None) -> Path:
        dst = tmp_path / (name or src.name)
        shutil.copyfile(src, dst)
        return dst

    return _copy


@pytest.fixture(scope="session")
def fused_run_dir(tmp_path_factory) -> Path:
    """The shipped fused-kernel capture (nsys report + probe dumps + host calibration), analyzed once."""
    from xstage_trace.runner import analyze_inputs

    out = tmp_path_factory.mktemp("fused_run") / "fused.xstage-run"
    analyze_inputs([FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"], out,
                   calibration=CALIB / "calibration_host.json")
    return out


@pytest.fixture(scope="session")
def partial_runs(tmp_path_factory) -> dict[str, Path]:
    """Runs that lack one input each: ``no_probes`` (nsys report only), ``no_nsys`` (probe dumps
    only), ``no_calibration`` (both, analyzed without --calibration)."""
    from xstage_trace.runner import analyze_inputs

    base = tmp_path_factory.mktemp("partial_runs")
    rep, dumps = FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"
    runs = {"no_probes": [rep], "no_nsys": sorted(dumps.glob("*_S1_*.xsp*")), "no_calibration": [rep, dumps]}
    out = {}
    for name, inputs in runs.items():
        out[name] = base / f"{name}.xstage-run"
        analyze_inputs(inputs, out[name])
    return out


@pytest.fixture(scope="session")
def calibration_run_dir(tmp_path_factory) -> Path:
    """The shipped quick calibration sweep (22 benchmark dumps), analyzed once: a run with calibration points."""
    from xstage_trace.runner import analyze_inputs

    out = tmp_path_factory.mktemp("calibration_run") / "quick.xstage-run"
    analyze_inputs(sorted((CALIB / "quick").glob("*.xsp*")), out)
    return out
