"""xstage-trace probes for FlashAttention-4's CuTe DSL forward kernel (written for xstage-trace,
placed by ``xstage-trace instrument apply --target fa4``).

Compile-time switch: ``XSTAGE_TRACE=1`` in the environment when this module is imported; off,
every helper below folds away (``const_expr``) and the kernel is unchanged. On, the consumer's
first thread writes one row per output tile into the LAST tensor of ``aux_tensors`` (int64, shape
``(num_ctas, capacity, 4)``: tile id, clock64 at tile start, after the mainloop, after the
epilogue); the caller allocates it and passes it with ``flash_attn_func(..., aux_tensors=[..., rec])``,
so no kernel signature changes and the aux-tensor metadata keys the compile cache.
"""

import os

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass._mlir.dialects import llvm

ENABLED = os.environ.get("XSTAGE_TRACE", "0") == "1"
RECORD_FIELDS = 4  # tile, clock at tile start, after the mainloop, after the epilogue


@dsl_user_op
def clock64(*, loc=None, ip=None) -> Int64:
    """The SM's cycle counter (``%clock64``), ordered with respect to the surrounding code."""
    return Int64(
        llvm.inline_asm(T.i64(), [], "mov.u64 $0, %clock64;", "=l", has_side_effects=True,
                        is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)
    )


@cute.jit
def tile_id(m_block: Int32, head_idx: Int32, batch_idx: Int32) -> Int64:
    """Batch in bits 32.., head in bits 16..31, m block in bits 0..15."""
    return (Int64(batch_idx) << 32) | (Int64(head_idx) << 16) | Int64(m_block)


@cute.jit
def write_tile(aux_tensors, slot: Int32, tidx: Int32, tile: Int64, t_begin: Int64, t_mainloop: Int64, t_end: Int64):
    """Thread 0 of the consumer writes the tile's row (slots past the capacity are dropped)."""
    if const_expr(ENABLED and aux_tensors is not None):
        rec = aux_tensors[len(aux_tensors) - 1]
        bidx, bidy, bidz = cute.arch.block_idx()
        gdimx, gdimy, _ = cute.arch.grid_dim()
        cta = bidx + gdimx * (bidy + gdimy * bidz)
        if tidx == 0 and slot < rec.shape[1]:
            rec[cta, slot, 0] = tile
            rec[cta, slot, 1] = t_begin
            rec[cta, slot, 2] = t_mainloop
            rec[cta, slot, 3] = t_end
