"""The fused kernel's probes do not change the kernel's own code (issue 10): built with and without
-DXSTAGE_TRACE for sm_90a, the two builds use the same registers, the same setup code and the same
Tensor Core K loop, instruction for instruction (registers renumbered). Needs nvcc and nvdisasm (the
CUDA toolkit, or the triton wheel's nvdisasm); skipped where they are absent (CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xstage_trace.instrument import codegen_check as cc

ROOT = Path(__file__).resolve().parents[1]
FUSED = ROOT / "instrument" / "examples" / "fused_moe.cu"
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


@pytest.fixture(scope="module")
def fused_builds(tmp_path_factory):
    wd = tmp_path_factory.mktemp("codegen")
    plain = cc.compile_and_disassemble(TOOLS, FUSED, "fused_moe_kernel", [], wd)
    traced = cc.compile_and_disassemble(TOOLS, FUSED, "fused_moe_kernel", ["-DXSTAGE_TRACE"], wd)
    return plain, traced


@needs_cuda
def test_fused_kernel_same_registers_traced_and_plain(fused_builds):
    plain, traced = fused_builds
    assert traced.registers == plain.registers


@needs_cuda
def test_fused_kernel_probes_present_only_in_traced_build(fused_builds):
    lines = FUSED.read_text().splitlines()
    cls = cc.Classifier(FUSED.name, lines)
    plain, traced = fused_builds
    assert not any("SR_CLOCKLO" in i.text or "STG.E.EF" in i.text for i in plain.instrs)
    # one streamed (evict-first) record store per probe site: 5 MMA-side, 2 + 2 epilogue-side
    assert sum("STG.E.EF.128" in i.text for i in traced.instrs if cls.is_probe(i)) >= 9


@needs_cuda
def test_fused_kernel_setup_and_smem_k_loop_identical(fused_builds):
    plain, traced = fused_builds
    lines = FUSED.read_text().splitlines()
    cls = cc.Classifier(FUSED.name, lines, [cc.find_region(lines, *r) for r in cc.FUSED_MOE_REGIONS])
    c = cc.compare(plain, traced, cls)
    assert {r.name: r.identical for r in c.regions}["setup"]
    # The default build reads its operands from shared memory: that K loop is the first HMMA loop.
    smem_loop_plain, smem_loop_traced = plain.hot_loops()[0], traced.hot_loops()[0]
    assert sum(i.opcode == "HMMA.16816.F32.BF16" for i in smem_loop_plain) == 32  # 2 x 8 m16n16k16 = 32 m16n8k16
    assert [i.normalized for i in smem_loop_traced] == [i.normalized for i in smem_loop_plain]


@needs_cuda
def test_check_detects_a_probe_that_changes_the_kernel(tmp_path):
    src = tmp_path / "perturbed.cu"
    src.write_text(PERTURBED)
    c = cc.check_source(src, "k", [], TOOLS)
    assert c.probe_instructions > 0
    assert not c.identical


def test_parse_nvdisasm_frames_and_branch_targets():
    text = """//--------------------- .text._Z1kv --------------------------
_Z1kv:
\t//## File "/x/probe.cuh", line 7 inlined at "/x/k.cu", line 3
\t//## File "/x/k.cu", line 3
        /*0000*/                   CS2R R4, SR_CLOCKLO ;
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
    assert ins[1].normalized == "IADD3 R, R, 0x1, RZ" and ins[2].normalized == "@P BRA L"
    cls = cc.Classifier("k.cu", ["", "", "XSTAGE_BEGIN(0, 1);", "x += 1;"])
    assert cls.is_probe(ins[0]) and not cls.is_probe(ins[1])
