"""Triton probes (xstage_trace.instrument.triton): record layout, the constexpr-off build, the K loop's
SASS with probes on (the FLUX recipe, flux-triton, is tested with the others in test_recipes.py).

The layout tests build the two int64 arrays exactly as the inline PTX writes them (taking the tag
immediate, the anchor offsets and the slot arithmetic from the generated PTX text) and check the
decoded dump against docs/probe-format.md and hand-computed times. The compile tests need the
triton package (CPU is enough: kernels are compiled for sm_90a, not run; the SASS tests also need
the nvdisasm of the Triton wheel); GPU tests are marked ``gpu``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

triton = pytest.importorskip("triton", minversion="3.6")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from xstage_trace.base.errors import InputError  # noqa: E402
from xstage_trace.base.probe_layout import SLICE_DTYPE  # noqa: E402
from xstage_trace.collectors.probe_format import decode_probe_dump  # noqa: E402
from xstage_trace.instrument import triton as xp  # noqa: E402
from tools import triton_gemm as g  # noqa: E402
from xstage_trace.instrument import triton_sass  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


def _tag(event: int, kind: int) -> int:
    """The immediate the record PTX or-s into the high word of clock64."""
    (imm,) = re.findall(r"or\.b32 xp_hi, xp_hi, (\d+);", xp._record_asm(event, kind))
    return int(imm)


def _anchor_offsets(close: bool) -> dict[str, int]:
    asm = xp._anchor_asm(xp._OFF_SMID_CLOSE if close else xp._OFF_SMID_OPEN, xp._OFF_CLOSE if close else xp._OFF_OPEN, close)
    out = {"smid": int(re.search(r"st\.global\.u32 \[xp_m\+(\d+)\], xp_s", asm).group(1)),
           "pair": int(re.search(r"st\.global\.v2\.u64 \[xp_m\+(\d+)\], \{xp_g, xp_c\}", asm).group(1))}
    if close:
        out["count"] = int(re.search(r"st\.global\.v2\.u32 \[xp_m\+(\d+)\], \{\$2, 1\}", asm).group(1))
    return out


def test_record_tag_puts_event_in_bits_48_to_55_and_kind_in_56_57():
    for event, kind in [(0, 0), (1, 1), (7, 2), (255, 2)]:
        assert _tag(event, kind) << 32 == (event << 48) | (kind << 56)


def test_span_pair_block_writes_begin_end_of_each_event_in_consecutive_slots():
    asm = xp._span_pair_asm((5, 9))
    tags = [int(t) for t in re.findall(r"or\.b32 xp_hi, xp_hi, (\d+);", asm)]
    assert [t << 32 for t in tags] == [(5 << 48) | (1 << 56), (5 << 48) | (2 << 56), (9 << 48) | (1 << 56), (9 << 48) | (2 << 56)]
    stores = re.findall(r"st\.global\.cs\.v4\.u32 \[\$1\+(\d+)\], \{xp_lo, xp_hi, \$6, (\S+)\}", asm)
    # 16-byte records in consecutive slots; begin records carry payload 0, the ends $7 and $8
    assert stores == [("0", "0"), ("16", "$7"), ("32", "0"), ("48", "$8")]
    clocks = re.findall(r"mov\.b64 \{xp_lo, xp_hi\}, \$(\d);", asm)
    assert clocks == ["2", "3", "4", "5"]


def test_anchor_stores_land_on_the_slice_meta_fields_of_the_format():
    f = SLICE_DTYPE.fields
    assert _anchor_offsets(False) == {"smid": f["smid_open"][1], "pair": f["gt_open"][1]}
    assert f["clk_open"][1] == f["gt_open"][1] + 8
    assert _anchor_offsets(True) == {"smid": f["smid_close"][1], "pair": f["gt_close"][1], "count": f["count"][1]}
    assert f["closed"][1] == f["count"][1] + 4 and f["clk_close"][1] == f["gt_close"][1] + 8


def test_stamped_record_takes_its_clock_from_the_stamp_read_at_the_probe_point():
    # operands of the stamped record: $1 slot address, $2 the stamp, $3 tile, $4 payload
    asm = xp._record_asm(3, 2, stamped=True)
    assert "%clock64" not in asm and "mov.u64 xp_c, $2;" in asm
    assert "st.global.cs.v4.u32 [$1], {xp_lo, xp_hi, $3, $4};" in asm
    assert xp._STAMP_ASM == "mov.u64 $0, %clock64;"  # the stamp: clock64 into the builtin's 64-bit result
    immediate = xp._record_asm(3, 2)
    assert "mov.u64 xp_c, %clock64;" in immediate and "st.global.cs.v4.u32 [$1], {xp_lo, xp_hi, $2, $3};" in immediate


def test_probe_rejects_event_ids_and_kinds_outside_the_format():
    with pytest.raises(ValueError):
        xp._record_asm(256, 1)
    with pytest.raises(ValueError):
        xp._record_asm(0, 3)
    with pytest.raises(ValueError):
        xp._span_pair_asm((0, 256))


def test_record_store_is_predicated_on_thread_0_alone():
    # a slot test in the store's predicate changes the K loop of a persistent GEMM (docs/triton-probes.md)
    for asm in (xp._record_asm(0, 1), xp._record_asm(0, 1, stamped=True), xp._span_pair_asm((0, 1))):
        stores = [line for line in asm.splitlines() if "st.global" in line]
        assert stores and all(line.startswith("@xp_p st.global.cs.v4.u32 [$1") for line in stores)
        assert re.findall(r"(?:setp|and\.pred|or\.pred|selp)\S* xp_p\b.*", asm) == ["setp.eq.u32 xp_p, xp_t, 0;"]
        assert "mov.u32 xp_t, %tid.x;" in asm


def _words(records_per_slice, capacity, gt_open, clk_open, span_ns, span_cyc, smid):
    """The int64 arrays as the probes leave them: meta (6 words per slice), records (2 per slot)."""
    n_sl = len(records_per_slice)
    meta = np.zeros((n_sl, 6), np.int64)
    rec = np.zeros((n_sl, capacity, 2), np.int64)
    for s, recs in enumerate(records_per_slice):
        for i, (event, kind, clk, tile, payload) in enumerate(recs[:capacity]):
            lo, hi = clk & 0xFFFFFFFF, ((clk >> 32) & 0xFFFF) | _tag(event, kind)
            rec[s, i, 0] = np.int64(np.uint64((hi << 32) | lo).astype(np.int64))
            rec[s, i, 1] = tile | (payload << 32)
        meta[s, 0] = len(recs) | (1 << 32)  # count, closed = 1
        meta[s, 1] = smid[s] | (smid[s] << 32)
        meta[s, 2:6] = [gt_open[s], clk_open[s], gt_open[s] + span_ns, clk_open[s] + span_cyc]
    return meta.reshape(-1), rec.reshape(-1)


def test_dump_written_from_probe_words_decodes_with_per_slice_clock(tmp_path):
    gt0, ck0 = [1_000_000_000, 1_000_050_000], [5_000_000, (1 << 48) - 1000]  # slice 1's clock wraps its low 48 bits
    span_ns, span_cyc = 100_000, 173_000  # 1.73 GHz
    recs = [[(0, 1, ck0[0] + 1730, 3, 0), (0, 2, ck0[0] + 17300, 3, 0), (1, 1, ck0[0] + 17301, 3, 0), (1, 2, ck0[0] + 34600, 3, 32768)],
            [(0, 1, ck0[1] + 3460, 135, 0), (0, 2, ck0[1] + 173000 - 1, 135, 7)]]
    meta, rec = _words(recs, 4, gt0, ck0, span_ns, span_cyc, smid=[10, 77])
    path = xp.write_dump(tmp_path / "t.xsp", meta, rec, 4, ["mainloop", "store"], gpu_name="NVIDIA H200", sm_count=132,
                         sm_clock_khz=1_980_000, label="kernel=t")
    d = decode_probe_dump(path)
    r = d.records.to_pandas()
    assert list(r["event"].astype(str)) == ["mainloop", "mainloop", "store", "store", "mainloop", "mainloop"]
    assert list(r["kind"].astype(str)) == ["begin", "end", "begin", "end", "begin", "end"]
    assert list(r["tile"]) == [3, 3, 3, 3, 135, 135] and list(r["payload"]) == [0, 0, 0, 32768, 0, 7]
    assert list(r["sm_id"]) == [10, 10, 10, 10, 77, 77]
    npc = span_ns / span_cyc
    expect = [gt0[0] + round(1730 * npc), gt0[0] + round(17300 * npc), gt0[0] + round(17301 * npc), gt0[0] + round(34600 * npc),
              gt0[1] + round(3460 * npc), gt0[1] + round(172999 * npc)]
    assert np.abs(r["t_gt_ns"].to_numpy() - np.array(expect)).max() <= 1
    assert d.slices.to_pandas()["records_dropped"].sum() == 0


def test_counts_past_capacity_are_reported_as_dropped(tmp_path):
    recs = [[(0, 1, 1000 + 10 * i, 0, 0) for i in range(6)]]
    meta, rec = _words(recs, 4, [10**9], [1000], 100_000, 173_000, smid=[0])
    path = xp.write_dump(tmp_path / "o.xsp", meta, rec, 4, ["mainloop"], gpu_name="g", sm_count=1, sm_clock_khz=1_980_000)
    with pytest.raises(InputError, match="2 records dropped"):
        decode_probe_dump(path)
    assert decode_probe_dump(path, allow_overflow=True).slices.to_pandas()["records_dropped"].tolist() == [2]


GEMM_SIG = {"a": "*bf16", "b": "*bf16", "c": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_ak": "i32",
            "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32", "stride_cn": "i32"}
GEMM_CONST = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "NUM_PROGRAMS": 132}


def _compile(fn, extra_sig: dict, extra_const: dict):
    sig, const = dict(GEMM_SIG, **extra_sig), dict(GEMM_CONST, **extra_const)
    sig.update({k: "constexpr" for k in const})
    try:
        return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const), target=TARGET,
                              options={"num_warps": 8, "num_stages": 3})
    except Exception as exc:  # no bundled ptxas / LLVM on this machine
        pytest.skip(f"triton cannot compile for sm_90 here: {exc}")


def _ptx_body(ptx: str) -> list[str]:
    """Instructions and declarations of the kernel, without debug lines and with the kernel name blanked."""
    out = []
    for line in ptx.splitlines():
        s = line.strip()
        if not s or s.startswith((".loc", ".file", "//")):
            continue
        if s.startswith(".section"):
            break
        out.append(re.sub(r"\bgemm_\w+", "KERNEL", s))
    return out


@pytest.fixture(scope="module")
def gemm_builds():
    plain = _compile(g.gemm_plain, {}, {})
    off = _compile(g.gemm_instrumented, {"trace_meta": "constexpr", "trace_records": "constexpr"}, xp.off_args())
    on = _compile(g.gemm_instrumented, {"trace_meta": "*i64", "trace_records": "*i64"}, {"TRACE_CAP": 32, "XSTAGE": True})
    return plain, off, on


def test_probes_switched_off_compile_to_the_probe_free_kernel(gemm_builds):
    plain, off, _ = gemm_builds
    assert _ptx_body(off.asm["ptx"]) == _ptx_body(plain.asm["ptx"])
    assert "%clock64" not in off.asm["ptx"] and "%globaltimer" not in off.asm["ptx"]


# How Triton specializes the benchmark's launch (4096 × 4096 × 8192, contiguous tensors): pointers
# and integers divisible by 16 carry tt.divisibility = 16, integers equal to 1 become constants.
UNIT_STRIDES = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1}


def _compile_as_launched(fn, extra_sig: dict, extra_const: dict):
    sig, const = dict(GEMM_SIG, **extra_sig), dict(GEMM_CONST, **UNIT_STRIDES, **extra_const)
    sig.update({k: "constexpr" for k in const})
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k, v in sig.items() if v != "constexpr"}
    try:
        return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=TARGET,
                              options={"num_warps": 8, "num_stages": 3})
    except Exception as exc:  # no bundled ptxas / LLVM on this machine
        pytest.skip(f"triton cannot compile for sm_90 here: {exc}")


TRACED = ({"trace_meta": "*i64", "trace_records": "*i64"}, {"TRACE_CAP": 32, "XSTAGE": True})


@pytest.fixture(scope="module")
def mma_loops():
    """The K loop of the probe-free GEMM and of every instrumented form, as the benchmark launches them."""
    try:
        triton_sass.nvdisasm()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    builds = {"plain": _compile_as_launched(g.gemm_plain, {}, {}),
              "persistent_loop_form": _compile_as_launched(g.gemm_instrumented, *TRACED)}
    for name, form in g.BREAKDOWN.items():
        builds[name] = _compile_as_launched(g.gemm_breakdown, TRACED[0], dict(TRACED[1], FORM=form))
    assert builds["persistent_loop_form"].asm["ptx"].count("st.global.cs.v4.u32") == 4  # the probes are in
    return {name: triton_sass.kernel_mma_loop(k) for name, k in builds.items()}


def test_k_loop_found_is_the_tensor_core_k_step(mma_loops):
    # BLOCK_K = 64 per step, 16 per bf16 HGMMA: 4 HGMMA per warpgroup and step, each 64 × BLOCK_N
    mix = mma_loops["plain"].mix
    assert sum(n for text, n in mix.items() if text.startswith("HGMMA.64x128x16.F32.BF16")) == 4
    assert sum(n for text, n in mix.items() if text.startswith("LDGSTS")) == 8  # next stage: 128×64 + 64×128 bf16, 16 B each


@pytest.mark.parametrize("variant", ["persistent_loop_form", *g.BREAKDOWN])
def test_probes_leave_the_k_loop_sass_of_the_probe_free_kernel(mma_loops, variant):
    plain, traced = mma_loops["plain"], mma_loops[variant]
    assert len(traced.instructions) == len(plain.instructions)
    assert traced.mix == plain.mix  # same instructions and register files (R2UR count included), order aside
    assert traced.uniform == plain.uniform


def test_probes_switched_on_emit_one_store_per_record_and_two_anchors(gemm_builds):
    ptx = gemm_builds[2].asm["ptx"]
    # gemm_instrumented's source: begin/end around the mainloop and the store (4 records per tile
    # inside the tile loop), anchors at open and close
    assert ptx.count("st.global.cs.v4.u32") == 4
    assert ptx.count("%globaltimer") == 2
    assert ptx.count("%clock64") == 6


def test_tiles_past_the_capacity_go_to_spare_slots_the_dump_leaves_out(gemm_builds, tmp_path):
    ptx = gemm_builds[2].asm["ptx"]  # gemm_instrumented, TRACE_CAP = 32: one span-pair block of 4 records per tile
    # the slot arithmetic as compiled: slice base = records + slice · stride (bytes); the tile's first
    # slot (tile / P) · 4 clamped to the capacity; the block's stores at +0, +16, +32, +48
    # (the GEMM's own mad.wide multiply by the 2-byte element size)
    (stride_bytes,) = {int(x) for x in re.findall(r"mad\.wide\.s32\s+%rd\d+, %r\d+, (\d+), %rd\d+;", ptx)} - {2}
    (clamp,) = {int(x) for x in re.findall(r"min\.u32\s+%r\d+, %r\d+, (\d+);", ptx)}
    offsets = [int(x) for x in re.findall(r"st\.global\.cs\.v4\.u32 \[%rd\d+\+(\d+)\]", ptx)]
    capacity = 32
    assert clamp == capacity and stride_bytes == (capacity + xp.SPARE_SLOTS) * 16 and offsets == [0, 16, 32, 48]
    stride = stride_bytes // 16
    n_slices, tiles_per_slice = 3, [9, 8, 1]  # slice 0 overflows by one tile, slice 1 is exactly full
    device = np.zeros((n_slices * stride, 2), np.int64)  # the device array, as TraceBuffer allocates it
    for s, n in enumerate(tiles_per_slice):
        for i in range(n):
            first = min(4 * i, clamp)
            for j, off in enumerate(offsets):
                device[s * stride + first + off // 16] = [(_tag(j // 2, 1 + j % 2) << 32) | (1000 + 10 * i + j),
                                                         (100 * s + i) | (j << 32)]
    meta = np.zeros((n_slices, 6), np.int64)
    meta[:, 0] = 4 * np.array(tiles_per_slice) | (1 << 32)  # probe_close_tiles' count: tiles × 4
    meta[:, 2:6] = [10**9, 1000, 10**9 + 100_000, 1000 + 173_000]
    words = xp.stored_records(device.reshape(-1), n_slices, capacity)
    assert words.size == n_slices * capacity * 2
    path = xp.write_dump(tmp_path / "s.xsp", meta.reshape(-1), words, capacity, g.EVENT_NAMES, gpu_name="g", sm_count=3,
                         sm_clock_khz=1_980_000)
    d = decode_probe_dump(path, allow_overflow=True)
    r = d.records.to_pandas()
    # the first `capacity` records of each slice, in order: tiles 0..7 of slice 0, 100..107, then 200
    assert list(r["tile"]) == [t for t in range(8) for _ in range(4)] + [100 + t for t in range(8) for _ in range(4)] + [200] * 4
    assert list(r["event"].astype(str))[:4] == ["mainloop", "mainloop", "store", "store"]
    assert list(r["kind"].astype(str))[:4] == ["begin", "end", "begin", "end"]
    assert d.slices.to_pandas()["records_dropped"].tolist() == [4, 0, 0]


@pytest.mark.gpu
def test_probed_kernel_on_the_gpu_writes_a_decodable_dump(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    m = n = 512
    k = 256
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    programs, tiles = 4, (m // 128) * (n // 128)
    buf = xp.TraceBuffer(programs, tiles // programs * 4)
    g.gemm_instrumented[(programs,)](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                                     c.stride(1), **buf.kernel_args(), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                                     NUM_PROGRAMS=programs)
    d = decode_probe_dump(buf.dump(tmp_path / "g.xsp", g.EVENT_NAMES), allow_overflow=False)
    r = d.records.to_pandas()
    assert len(r) == tiles * 4 and sorted(r["tile"].unique()) == list(range(tiles))
    assert torch.allclose(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
