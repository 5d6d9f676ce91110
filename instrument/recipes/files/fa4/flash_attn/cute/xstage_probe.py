"""xstage-trace probes for FlashAttention-4's CuTe DSL forward kernel (written for xstage-trace,
placed by ``xstage-trace instrument apply --target fa4``).

Compile-time switch: ``XSTAGE_TRACE=1`` in the environment when this module is imported; off,
every helper below folds away (``const_expr`` / a Python-level constant: no clock read, no store)
and the kernel is unchanged. On, the consumer's first thread writes one row per output tile into
the LAST tensor of ``aux_tensors`` (int64, shape ``(num_ctas, capacity, RECORD_FIELDS)``, zeroed by
the caller): tile id, ``%clock64`` at tile start, after the mainloop and after the epilogue,
``%globaltimer`` (ns) at tile start and after the epilogue, ``%smid``, and 1 (row written). The caller
passes it with ``_flash_attn_fwd(..., aux_tensors=[..., rec])``, so no kernel signature changes and
the aux-tensor metadata keys the compile cache.
"""

import os

import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass._mlir.dialects import llvm

ENABLED = os.environ.get("XSTAGE_TRACE", "0") == "1"
# tile, clock at tile start / after the mainloop / after the epilogue, globaltimer at tile start /
# after the epilogue, smid, written flag
RECORD_FIELDS = 8


def _read(asm: str, ty) -> object:
    """One side-effecting special-register read (not moved across the surrounding code)."""
    return llvm.inline_asm(ty, [], asm, "=l" if ty == T.i64() else "=r", has_side_effects=True,
                           is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)


@dsl_user_op
def clock64(*, loc=None, ip=None) -> Int64:
    """The SM's cycle counter (``%clock64``); 0 and no instruction when tracing is off."""
    if not ENABLED:
        return Int64(0)
    return Int64(_read("mov.u64 $0, %clock64;", T.i64()))


@dsl_user_op
def globaltimer(*, loc=None, ip=None) -> Int64:
    """The GPU's nanosecond timer (``%globaltimer``); 0 and no instruction when tracing is off."""
    if not ENABLED:
        return Int64(0)
    return Int64(_read("mov.u64 $0, %globaltimer;", T.i64()))


@dsl_user_op
def smid(*, loc=None, ip=None) -> Int32:
    """The SM this thread runs on (``%smid``); 0 and no instruction when tracing is off."""
    if not ENABLED:
        return Int32(0)
    return Int32(_read("mov.u32 $0, %smid;", T.i32()))


@cute.jit
def tile_id(m_block: Int32, head_idx: Int32, batch_idx: Int32) -> Int64:
    """Batch in bits 32.., head in bits 16..31, m block in bits 0..15."""
    return (Int64(batch_idx) << 32) | (Int64(head_idx) << 16) | Int64(m_block)


@cute.jit
def write_tile(aux_tensors, slot: Int32, tidx: Int32, tile: Int64, t_begin: Int64, gt_begin: Int64,
               t_mainloop: Int64, t_end: Int64):
    """Thread 0 of the consumer writes the tile's row (slots past the capacity are dropped)."""
    if const_expr(ENABLED and aux_tensors is not None):
        gt_end = globaltimer()
        sm = smid()
        rec = aux_tensors[len(aux_tensors) - 1]
        bidx, bidy, bidz = cute.arch.block_idx()
        gdimx, gdimy, _ = cute.arch.grid_dim()
        cta = bidx + gdimx * (bidy + gdimy * bidz)
        if tidx == 0:
            if slot < rec.shape[1]:
                rec[cta, slot, 0] = tile
                rec[cta, slot, 1] = t_begin
                rec[cta, slot, 2] = t_mainloop
                rec[cta, slot, 3] = t_end
                rec[cta, slot, 4] = gt_begin
                rec[cta, slot, 5] = gt_end
                rec[cta, slot, 6] = Int64(sm)
                rec[cta, slot, 7] = Int64(1)
