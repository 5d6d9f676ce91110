"""The fused kernel's probes do not change the kernel's own code (issue 10): built with and without
-DXSTAGE_TRACE for sm_90a, the traced build uses no more registers and the same Tensor Core K loop,
instruction for instruction and with the same schedule (registers renumbered), and its MMA warps'
probe code in the tile loop issues no load and no global store (they only stamp the clock into
shared memory; the epilogue's writer writes their records). Needs nvcc and nvdisasm (the CUDA
toolkit, or the triton wheel's nvdisasm); skipped where they are absent (CI)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tools import codegen_check as cc
from xstage_trace.instrument import include_dir

ROOT = Path(__file__).resolve().parents[1]
FUSED = ROOT / "src" / "xstage_trace" / "instrument" / "examples" / "fused_moe.cu"
TOOLS = cc.find_toolchain()
needs_cuda = pytest.mark.skipif(TOOLS is None, reason="nvcc or nvdisasm not installed")

# A kernel whose traced build keeps a record count live across a loop that the plain build does not
# have: the check must see the difference (it is not a check that passes on anything).
PERTURBED = r"""
#include <xstage/probe.cuh>
__global__ void k(float* out, int n, xstage::DeviceBuffer buf) {
  XSTAGE_PROBE_OPEN(buf, 0);
  float acc = 0.f;
  for (int i = 0; i < n; ++i) {
    XSTAGE_BEGIN(0, i);
    acc = acc * out[i] + 1.f;
  }
  XSTAGE_PROBE_CLOSE();
  out[threadIdx.x] = acc;
}
"""

# Every hand-over macro once: compiled out they must leave nothing, compiled in they stamp into shared
# memory (two stamps) and write streamed records (three).
HANDOVER = r"""
#include <xstage/probe.cuh>
__global__ void k(float* out, xstage::DeviceBuffer buf) {
#ifdef XSTAGE_TRACE
  __shared__ xstage::u32 stamps[2];
#endif
  if (threadIdx.x < 32) {
    XSTAGE_PROBE_OPEN_IF(buf, 0, true);
    XSTAGE_STAMP(&stamps[0]);
    out[threadIdx.x] *= 2.f;
    XSTAGE_STAMP(&stamps[1]);
  }
  __syncthreads();
  if (threadIdx.x >= 32) {
    XSTAGE_PROBE_ATTACH_AS(other, buf, 0, threadIdx.x < 64);
    XSTAGE_BEGIN_AT(other, stamps[0], 0, 7);
    XSTAGE_MARK_AT(other, stamps[0], 1, 7, 3);
    XSTAGE_END_AT(other, stamps[1], 0, 7);
    XSTAGE_PROBE_CLOSE_AS(other);
  }
}
"""


@pytest.fixture(scope="module")
def fused_builds(tmp_path_factory):
    wd = tmp_path_factory.mktemp("codegen")
    plain = cc.compile_and_disassemble(TOOLS, FUSED, "fused_moe_kernel", [], wd)
    traced = cc.compile_and_disassemble(TOOLS, FUSED, "fused_moe_kernel", ["-DXSTAGE_TRACE"], wd)
    return plain, traced


@needs_cuda
def test_fused_kernel_traced_uses_no_more_registers(fused_builds):
    plain, traced = fused_builds
    assert traced.registers <= plain.registers


@needs_cuda
def test_fused_kernel_probes_present_only_in_traced_build(fused_builds):
    lines = FUSED.read_text().splitlines()
    cls = cc.Classifier(FUSED.name, lines)
    plain, traced = fused_builds
    assert not any("SR_CLOCKLO" in i.text or "STG.E.EF" in i.text for i in plain.instrs)
    # one streamed (evict-first) record store per record site, all in the epilogue's writer: per
    # epilogue variant (bulk copy, st.global) its own 2 and the MMA role's 5
    assert sum("STG.E.EF.128" in i.text for i in traced.instrs if cls.is_probe(i)) >= 14


@needs_cuda
def test_fused_kernel_smem_k_loop_same_instructions_and_schedule(fused_builds):
    plain, traced = fused_builds
    # The default build reads its operands from shared memory: that K loop is the first HMMA loop.
    smem_loop_plain, smem_loop_traced = plain.hot_loops()[0], traced.hot_loops()[0]
    assert sum(i.opcode == "HMMA.16816.F32.BF16" for i in smem_loop_plain) == 32  # 2 x 8 m16n16k16 = 32 m16n8k16
    assert all(i.control is not None for i in smem_loop_plain + smem_loop_traced)
    assert [i.scheduled for i in smem_loop_traced] == [i.scheduled for i in smem_loop_plain]


@needs_cuda
def test_fused_mma_tile_loop_probes_issue_no_load_or_global_store(fused_builds):
    _, traced = fused_builds
    lines = FUSED.read_text().splitlines()
    loop = cc.find_region(lines, "mma_loop", r"for \(int t = blockIdx\.x; t < num_tiles; t \+= gridDim\.x, \+\+i\) \{", r"^    \}$")
    assert "if (is_mma) {" in "\n".join(lines[loop.first - 6:loop.first])  # the MMA role's tile loop comes first
    cls = cc.Classifier(FUSED.name, lines, [loop])
    probe = [i for i in traced.instrs if cls.is_probe(i) and cls.region(i) == "mma_loop"]
    assert [i.text for i in probe if re.match(r"(LD|ST(?!S)|RED|ATOM)", i.opcode)] == []
    # the four stamps: slot wait begin and end, mainloop begin (warp 0), mainloop end (warp 1)
    assert sum("SR_CLOCKLO" in i.text for i in probe) == 4
    assert sum(i.opcode == "STS" for i in probe) == 4


@needs_cuda
@pytest.mark.parametrize("traced", [False, True])
def test_handover_macros_compile_out_and_in(traced, tmp_path):
    src = tmp_path / "handover.cu"
    src.write_text(HANDOVER)
    ptx = tmp_path / "handover.ptx"
    r = subprocess.run([TOOLS.nvcc, "-std=c++17", f"-I{include_dir()}", "-ptx", "-gencode=arch=compute_90a,code=compute_90a",
                        *(["-DXSTAGE_TRACE"] if traced else []), str(src), "-o", str(ptx)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    text = ptx.read_text()
    if traced:
        assert text.count("st.shared.u32") == 2 and text.count("st.global.cs.v4.u32") == 3
        assert "%clock64" in text
    else:
        # the kernel's own store (st.global.f32) stays; no clock, no stamp, no record or metadata store
        assert "st.global.f32" in text
        assert not re.search(r"%clock64|%globaltimer|%smid|st\.shared|st\.global\.(cs|u32|u64)", text)


@needs_cuda
def test_check_detects_a_probe_that_changes_the_kernel(tmp_path):
    src = tmp_path / "perturbed.cu"
    src.write_text(PERTURBED)
    c = cc.check_source(src, "k", [], TOOLS)
    assert c.probe_instructions > 0
    assert not c.identical


def test_parse_nvdisasm_frames_branch_targets_and_control_bits():
    # The high word 0x005e8a0000015000 carries, from bit 41: stall 5, yield 0, write scoreboard 2,
    # read scoreboard 7 (none), wait mask 0b000101.
    text = """//--------------------- .text._Z1kv --------------------------
_Z1kv:
\t//## File "/x/probe.cuh", line 7 inlined at "/x/k.cu", line 3
\t//## File "/x/k.cu", line 3
        /*0000*/                   CS2R R4, SR_CLOCKLO ;                  /* 0x0000000000047805 */
                                                                          /* 0x005e8a0000015000 */
.L_x_1:
\t//## File "/x/k.cu", line 4
        /*0010*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0020*/              @P0 BRA `(.L_x_1) ;
//--------------------- SYMBOLS --------------------------
"""
    ins = cc.parse_nvdisasm(text, "_Z1kv")
    assert [i.offset for i in ins] == [0, 0x10, 0x20]
    assert ins[0].frames == (("probe.cuh", 7), ("k.cu", 3), ("k.cu", 3))
    assert ins[2].target == 0x10 and ins[1].target is None
    assert ins[0].control == cc.Control(stall=5, yield_flag=0, write_barrier=2, read_barrier=7, wait_mask=5)
    assert ins[1].control is None
    assert ins[1].normalized == "IADD3 R, R, 0x1, RZ" and ins[2].normalized == "@P BRA L"
    cls = cc.Classifier("k.cu", ["", "", "XSTAGE_BEGIN(0, 1);", "x += 1;"])
    assert cls.is_probe(ins[0]) and not cls.is_probe(ins[1])
