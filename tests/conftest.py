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
SAMPLE_WARMUPS = 2  # warm-up launches per configuration before the trials in the fused-kernel sample (PROVENANCE: times/ and traced/)
SHARED = ROOT.parent / "shared" / "reference_traces"


RECIPE_FIX = ROOT / "tests" / "fixtures" / "recipes"
DG_STEMS = ("sm90_fp8_gemm_1d2d", "sm90_fp8_gemm_1d1d", "sm90_bf16_gemm")


def deepgemm_tree(root: Path, kernel_fixture: str, stems: tuple[str, ...]) -> Path:
    """A DeepGEMM-shaped tree at ``root``: ``tests/fixtures/recipes/<kernel_fixture>/kernel.cuh.in`` and the
    sm_90 launcher shape under each of ``stems``, with the sm_90 fixture's ``csrc/python_api.cpp``."""
    kernel = (RECIPE_FIX / kernel_fixture / "kernel.cuh.in").read_text()
    launcher = (RECIPE_FIX / "deepgemm_sm90" / "launcher.hpp.in").read_text()
    for stem in stems:
        k = root / "deep_gemm/include/deep_gemm/impls" / f"{stem}.cuh"
        k.parent.mkdir(parents=True, exist_ok=True)
        k.write_text(kernel.replace("KERNEL", stem))
        la = root / "csrc/jit_kernels/impls" / f"{stem}.hpp"
        la.parent.mkdir(parents=True, exist_ok=True)
        la.write_text(launcher.replace("KERNEL", stem))
    shutil.copy(RECIPE_FIX / "deepgemm_sm90" / "python_api.cpp", root / "csrc" / "python_api.cpp")
    return root


@pytest.fixture
def dg_tree(tmp_path: Path) -> Path:
    """A DeepGEMM-shaped tree: the fixture kernel and launcher under the three sm_90 names."""
    return deepgemm_tree(tmp_path / "deepgemm", "deepgemm_sm90", DG_STEMS)


def reference_sqlite() -> Path:
    """The H200 Burst–Gap export (shipped zstd-compressed beside its report), decompressed."""
    from xstage_trace.collectors.compressed import decompressed_export

    return decompressed_export(next(REFERENCE.glob("h200_burst_gap_quick.nsys-rep.*.sqlite.zst")))


def dump_bytes(path: Path) -> bytes:
    """The plain bytes of a probe dump (sample dumps are shipped zstd-compressed)."""
    from xstage_trace.collectors.probe_format import read_dump_bytes

    return read_dump_bytes(Path(path)).tobytes()


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


def analyze_sample(out: Path, nvtx: str | None = None, warmup_launches: int = 0) -> Path:
    """analyze the traced fused-kernel report + dumps (with the host calibration) into ``out``."""
    from xstage_trace.pipeline.runner import analyze_inputs

    traced = FUSED / "traced"
    analyze_inputs([next(traced.glob("*.nsys-rep")), traced], out, calibration=CALIB / "calibration_host.json", nvtx=nvtx,
                   warmup_launches=warmup_launches)
    return out


@pytest.fixture(scope="session")
def fused_run(tmp_path_factory):
    """The sample fused-kernel capture analyzed once: all kernels and dumps."""
    return analyze_sample(tmp_path_factory.mktemp("runs") / "fused.run")


@pytest.fixture(scope="session")
def split_runs(tmp_path_factory):
    """The same capture split by NVTX range into a wave run and an interleaved run (analyze --nvtx),
    the driver's 2 warm-up launches per configuration left out (sample PROVENANCE)."""
    d = tmp_path_factory.mktemp("split")
    return (analyze_sample(d / "wave.run", "*schedule=wave*", SAMPLE_WARMUPS),
            analyze_sample(d / "interleaved.run", "*schedule=interleaved*", SAMPLE_WARMUPS))


@pytest.fixture(scope="session")
def fused_run_dir(fused_run) -> Path:
    """The shipped fused-kernel capture (nsys report + probe dumps + host calibration), analyzed once."""
    return fused_run


@pytest.fixture(scope="session")
def partial_runs(tmp_path_factory) -> dict[str, Path]:
    """Runs that lack one input each: ``no_probes`` (nsys report only), ``no_nsys`` (probe dumps
    only), ``no_calibration`` (both, analyzed without --calibration)."""
    from xstage_trace.pipeline.runner import analyze_inputs

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
    from xstage_trace.pipeline.runner import analyze_inputs

    out = tmp_path_factory.mktemp("calibration_run") / "quick.xstage-run"
    analyze_inputs(sorted((CALIB / "quick").glob("*.xsp*")), out)
    return out


def pytest_addoption(parser):
    """``--screenshots DIR``: where the browser tests write their screenshots (default: a temporary
    folder, so the test suite leaves the checkout as it was; tools/refresh_screenshots.py passes
    docs/screenshots)."""
    parser.addoption("--screenshots", default=None, metavar="DIR", help="folder for the dashboard browser tests' screenshots")
