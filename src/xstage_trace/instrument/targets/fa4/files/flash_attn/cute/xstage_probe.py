"""xstage-trace probes for FlashAttention-4's CuTe DSL forward kernel (written for xstage-trace,
placed by ``xstage-trace instrument apply --target fa4``).

Compile-time switch: ``XSTAGE_TRACE=1`` in the environment when this module is imported; off,
every helper below folds away (``const_expr``: no clock read, no store) and the kernel is unchanged.

On, the consumer's first thread writes its tile's row of the LAST tensor of ``aux_tensors``: int64,
shape ``(batch, heads, m_blocks, RECORD_FIELDS)``, zeroed by the caller, one row per output tile
(indexed by the tile itself, so no per-CTA slot counter and no value lives across the K/V loop):
field 0 the linear CTA id, 1-3 ``%clock64`` at tile start / after the mainloop / after the epilogue,
4-5 ``%globaltimer`` (ns) at tile start / after the epilogue, 6 ``%smid``, 7 = 1 (row written). Each
probe stores its fields at once. The caller passes the tensor with ``_flash_attn_fwd(...,
aux_tensors=[..., rec])``, so no kernel signature changes and the aux-tensor metadata keys the
compile cache.

Each probe derives its row's address afresh from its own clock read (``_fresh``: the tile's indices
plus ``clock >> 63``, which is 0 at run time but unknown to the compiler), so ptxas cannot compute the
address once at tile start and keep it in registers across the K/V loop; a value held there changes
the register allocation and the schedule of FA4's hot loop (measured: +4-6 % kernel time with four
64-bit clocks held, +2-3 % with only the row address held).
"""

import os

import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass._mlir.dialects import llvm

ENABLED = os.environ.get("XSTAGE_TRACE", "0") == "1"
RECORD_FIELDS = 8
CTA, CLK_BEGIN, CLK_MAINLOOP, CLK_END, GT_BEGIN, GT_END, SMID, WRITTEN = range(RECORD_FIELDS)


def _read(asm: str, ty):
    """One side-effecting special-register read (not moved across the surrounding code)."""
    return llvm.inline_asm(ty, [], asm, "=l" if ty == T.i64() else "=r", has_side_effects=True,
                           is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)


@dsl_user_op
def clock64(*, loc=None, ip=None) -> Int64:
    """The SM's cycle counter (``%clock64``)."""
    return Int64(_read("mov.u64 $0, %clock64;", T.i64()))


@dsl_user_op
def globaltimer(*, loc=None, ip=None) -> Int64:
    """The GPU's nanosecond timer (``%globaltimer``)."""
    return Int64(_read("mov.u64 $0, %globaltimer;", T.i64()))


@dsl_user_op
def smid(*, loc=None, ip=None) -> Int32:
    """The SM this thread runs on (``%smid``)."""
    return Int32(_read("mov.u32 $0, %smid;", T.i32()))


@cute.jit
def _fresh(clk: Int64, idx: Int32) -> Int32:
    """``idx`` plus 0, where the 0 comes from the clock read: not foldable, so not shared across probes."""
    return idx + Int32((clk >> 63) & 1)


@cute.jit
def tile_begin(aux_tensors, tidx: Int32, m_block: Int32, head_idx: Int32, batch_idx: Int32):
    """Tile start: clock, globaltimer, SM and CTA of the tile's row (thread 0 of the consumer)."""
    if const_expr(ENABLED and aux_tensors is not None):
        if tidx == 0:
            rec = aux_tensors[len(aux_tensors) - 1]
            clk = clock64()
            b, h, m = _fresh(clk, batch_idx), _fresh(clk, head_idx), _fresh(clk, m_block)
            rec[b, h, m, CLK_BEGIN] = clk
            rec[b, h, m, GT_BEGIN] = globaltimer()
            rec[b, h, m, SMID] = Int64(smid())
            bidx, bidy, bidz = cute.arch.block_idx()
            gdimx, gdimy, _ = cute.arch.grid_dim()
            rec[b, h, m, CTA] = Int64(bidx + gdimx * (bidy + gdimy * bidz))


@cute.jit
def mainloop_end(aux_tensors, tidx: Int32, m_block: Int32, head_idx: Int32, batch_idx: Int32):
    """End of the Q tile's K/V loop (softmax finalized, O rescaled): the clock."""
    if const_expr(ENABLED and aux_tensors is not None):
        if tidx == 0:
            rec = aux_tensors[len(aux_tensors) - 1]
            clk = clock64()
            rec[_fresh(clk, batch_idx), _fresh(clk, head_idx), _fresh(clk, m_block), CLK_MAINLOOP] = clk


@cute.jit
def tile_end(aux_tensors, tidx: Int32, m_block: Int32, head_idx: Int32, batch_idx: Int32):
    """After the epilogue (O and LSE written): clock, globaltimer, and the row's written flag."""
    if const_expr(ENABLED and aux_tensors is not None):
        if tidx == 0:
            rec = aux_tensors[len(aux_tensors) - 1]
            clk = clock64()
            b, h, m = _fresh(clk, batch_idx), _fresh(clk, head_idx), _fresh(clk, m_block)
            rec[b, h, m, CLK_END] = clk
            rec[b, h, m, GT_END] = globaltimer()
            rec[b, h, m, WRITTEN] = Int64(1)
