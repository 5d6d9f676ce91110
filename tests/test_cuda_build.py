"""The CUDA side builds for sm_90a with and without probes; compiled out, probes leave no trace.
GPU runs are marked ``gpu`` and skipped where no GPU is present (CI); they ran on the lent H200."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INC = ROOT / "src" / "xstage_trace" / "instrument" / "include"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
ARCH = "-gencode=arch=compute_90a,code=sm_90a"
CLOCK_READS = re.compile(r"%clock64|%clock\b|%globaltimer|%smid")


def nvcc(src: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    cmd = [NVCC, "-std=c++17", f"-I{INC}", *flags, str(src), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return r


@needs_nvcc
@pytest.mark.parametrize("traced", [False, True])
def test_probe_ptx(traced, tmp_path):
    ptx = tmp_path / "p.ptx"
    nvcc(ROOT / "tests" / "cuda" / "probe_sites.cu", ptx, "-ptx", "-gencode=arch=compute_90a,code=compute_90a",
         *(["-DXSTAGE_TRACE"] if traced else []))
    text = ptx.read_text()
    reads = CLOCK_READS.findall(text)
    if traced:
        assert {"%clock64", "%globaltimer", "%smid"} <= set(reads)
        assert "st.global.cs.v4.u32" in text  # streaming stores for the records
    else:
        assert reads == []
        assert "st.global.cs" not in text


@needs_nvcc
@pytest.mark.parametrize("src", ["bench/burst_gap.cu", "examples/fused_moe.cu"])
@pytest.mark.parametrize("traced", [False, True])
def test_sources_build_for_sm90a_every_kernel_without_spills(src, traced, tmp_path):
    out = tmp_path / "bin"
    r = nvcc(ROOT / "src" / "xstage_trace" / "instrument" / src, out, "-O3", ARCH, "-Xptxas", "-v", *(["-DXSTAGE_TRACE"] if traced else []))
    assert out.is_file()
    # ptxas -v: one "Compiling entry function 'K' for 'sm_90a'" per kernel, each followed by its own
    # "N bytes stack frame, S bytes spill stores, L bytes spill loads" line: every kernel, not just one
    entries = re.findall(r"Compiling entry function '([^']+)' for '(sm_\w+)'", r.stderr)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    assert entries and {arch for _, arch in entries} == {"sm_90a"}
    assert len(spills) >= len(entries) and all(st == ld == "0" for st, ld in spills), r.stderr


def _gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="no NVIDIA GPU on this machine")
def test_calibration_quick_sweep_on_gpu(tmp_path):
    from xstage_trace.pipeline.runner import run_calibration
    from xstage_trace.reports.calibration import write_calibration_report

    doc, points = run_calibration("host", tmp_path, quick=True, binary=None, nvcc=NVCC)
    write_calibration_report(tmp_path, doc, points)
    assert 40 <= doc["rate_gbps"] <= 120
    assert (tmp_path / "report_host.md").is_file() and list((tmp_path / "figures").glob("*.svg"))


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="no NVIDIA GPU on this machine")
def test_fused_kernel_on_gpu(tmp_path):
    exe = tmp_path / "fused"
    nvcc(ROOT / "src" / "xstage_trace" / "instrument" / "examples" / "fused_moe.cu", exe, "-O3", ARCH, "-DXSTAGE_TRACE")
    r = subprocess.run([str(exe), "--dest", "local", "--shape", "S1", "--trials", "2", "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "rel_err" in r.stdout and len(list(tmp_path.glob("*.xsp"))) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="no NVIDIA GPU on this machine")
def test_cupy_probe_buffer_on_gpu(tmp_path):
    cp = pytest.importorskip("cupy")
    from xstage_trace.collectors.probe_format import decode_probe_dump
    from xstage_trace.instrument import include_dir
    from xstage_trace.instrument.buffer import ProbeBuffer

    src = r"""
    #include <xstage/probe.cuh>
    extern "C" __global__ void k(float* out, xstage::DeviceBuffer buf) {
      XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
      for (int i = 0; i < 8; ++i) {
        if (threadIdx.x < 32) XSTAGE_BEGIN(0, i);
        out[blockIdx.x * blockDim.x + threadIdx.x] += i;
        __syncthreads();
        if (threadIdx.x < 32) XSTAGE_END_P(0, i, 4 * blockDim.x);
      }
      if (threadIdx.x < 32) XSTAGE_PROBE_CLOSE();
    }"""
    kern = cp.RawKernel(src, "k", options=(f"-I{include_dir()}", "-DXSTAGE_TRACE", "-std=c++17"))
    buf = ProbeBuffer(num_ctas=4, roles_per_cta=1, capacity=32)
    out = cp.zeros(4 * 128, cp.float32)
    kern((4,), (128,), (out, buf.kernel_arg()))
    d = decode_probe_dump(buf.dump(tmp_path / "cupy.xsp", ["step"], label="kernel=cupy_test"))
    assert d.records.num_rows == 4 * 16 and d.header["num_slices"] == 4
    assert set(d.records.column("payload").to_pylist()) == {0, 512}
    assert float(out.sum()) == 4 * 128 * 28
