"""analyze --nvtx: a run restricted to the kernels under matching NVTX ranges; NVTX phases of the
Python probe buffer."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd

from conftest import CALIB, FUSED
from xstage_trace import open_run
from xstage_trace.collectors.nvtx_filter import name_matches, under_matching


def test_nvtx_filter_keeps_the_wave_kernels_and_dumps(split_runs, fused_run):
    wave = open_run(split_runs[0])
    full = open_run(fused_run)
    k = wave.kernels()
    assert k["nvtx_range"].str.contains("schedule=wave ").all()
    assert len(k) == full.kernels()["nvtx_range"].str.contains("schedule=wave ", na=False).sum() == 28
    dumps = set(wave.probes()["dump"].astype(str).unique())
    assert dumps == {p.name for p in (FUSED / "traced").glob("*_wave_*.xsp*")}
    assert set(wave.tiles()["dump"]) == dumps
    slices = wave.probe_slices()  # the left-out dumps' slice parts, written as the plan read them, are gone
    assert set(slices["dump"].astype(str)) == dumps and wave.manifest["tables"]["probe_slices"] == len(slices)
    assert len(slices) == full.probe_slices()["dump"].astype(str).isin(dumps).sum()
    assert wave.manifest["nvtx_filter"]["kernels_kept"] == 28
    gm = wave.gpu_metrics()["timestamp_ns"].to_numpy()
    inside = ((gm[:, None] >= k["start_ns"].to_numpy()) & (gm[:, None] <= k["end_ns"].to_numpy())).any(axis=1)
    assert len(gm) and inside.all()


def test_nested_ranges_are_under_their_outer_range():
    # thread 1: step [0,100] ⊃ gemm [10,20], gemm [30,40]; then gemm [150,160] outside any step
    # thread 2: gemm [10,20] while thread 1's step runs (a different thread: not under it)
    r = pd.DataFrame({"rank": 0, "global_tid": [1, 1, 1, 1, 2], "name": ["step", "gemm", "gemm", "gemm", "gemm"],
                      "start_ns": [0, 10, 30, 150, 10], "end_ns": [100, 20, 40, 160, 20]})
    assert list(under_matching(r, name_matches(r["name"], "step"))) == [True, True, True, False, False]
    assert list(name_matches(r["name"], "g?mm")) == [False, True, True, True, True]
    assert list(name_matches(pd.Series(["a*b", "axb"]), "a*b")) == [True, True]


def test_no_matching_range_is_bad_input(tmp_path):
    traced = FUSED / "traced"
    r = subprocess.run([sys.executable, "-m", "xstage_trace", "analyze", str(next(traced.glob("*.nsys-rep"))), str(traced),
                        "--nvtx", "no such range", "-o", str(tmp_path / "r")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no NVTX range matches" in r.stderr
    assert not (tmp_path / "r").exists()


def test_probe_buffer_phases_are_in_the_xstage_domain():
    from xstage_trace.instrument.buffer import NVTX_DOMAIN, phase

    a = phase("xstage: reset probe buffer")
    assert NVTX_DOMAIN == "xstage" and a.init_args[:3] == ("xstage: reset probe buffer", None, "xstage")
    with a:  # no profiler attached: a no-op range
        pass


def test_leaving_out_the_control_dumps_is_warned(tmp_path):
    from conftest import analyze_sample

    analyze_sample(tmp_path / "r", "*dest=host shape=S1 *")
    assert any("left out every control dump" in w for w in open_run(tmp_path / "r").warnings())
