"""``fa4``: FlashAttention-4 (CuTe DSL, ``flash_attn/cute``) forward on sm_90: per output tile the
clock at tile start, after the Q-tile mainloop and after the epilogue, behind a compile-time flag."""

from __future__ import annotations

from xstage_trace.instrument.recipes.model import AddedFile, Anchor, Event, Recipe
from xstage_trace.instrument.recipes.targets.fa3 import UPSTREAM

_F = "flash_attn/cute/flash_fwd_sm90.py"
_MMA = r"^    def mma\("
_NEXT = r"^    def first_half_block_overlap\("

RECIPE = Recipe(
    name="fa4",
    title="FlashAttention-4 CuTe DSL forward, sm_90 (FlashAttentionForwardSm90.mma): per-tile clocks",
    architectures=("sm_90a",),
    upstream=(UPSTREAM,),
    sentinel=(_F, "flash_attn/cute/interface.py"),
    roles=("consumer: thread 0 of the MMA warpgroups (tidx == 0)",),
    events=(
        Event(0, "mainloop", "span", "consumer", "", "tile start to the end of the Q-tile loop (softmax finalized)"),
        Event(1, "epilogue", "span", "consumer", "", "O and LSE written (smem, then TMA or vectorized stores)"),
    ),
    anchors=(
        Anchor("import", _F, r"^from flash_attn\.cute\.utils import AuxData\n", "after",
               "from flash_attn.cute import xstage_probe", "from flash_attn.cute.utils import AuxData"),
        Anchor("slot_init", _F, r"^[ \t]*while work_tile\.is_valid_tile:\n", "before", "xstage_slot = Int32(0)",
               "while work_tile.is_valid_tile:", after=_MMA, until=_NEXT),
        Anchor("tile_begin", _F, r"^[ \t]*m_block, head_idx, batch_idx, _ = work_tile\.tile_idx\n", "after",
               "xstage_t_begin = xstage_probe.clock64()\nxstage_gt_begin = xstage_probe.globaltimer()",
               "m_block, head_idx, batch_idx, _ = work_tile.tile_idx",
               after=_MMA, until=_NEXT),
        Anchor("mainloop_end", _F, r"^[ \t]*self\.epilogue\(\n", "before", "xstage_t_mainloop = xstage_probe.clock64()",
               "self.epilogue(", after=_MMA, until=_NEXT),
        Anchor("tile_end", _F, r"^[ \t]*tile_scheduler\.advance_to_next_work\(\)\n", "before",
               "xstage_probe.write_tile(aux_tensors, xstage_slot, tidx, xstage_probe.tile_id(m_block, head_idx, batch_idx),\n"
               "                        xstage_t_begin, xstage_gt_begin, xstage_t_mainloop, xstage_probe.clock64())\n"
               "xstage_slot = xstage_slot + 1",
               "tile_scheduler.advance_to_next_work()", after=_MMA, until=_NEXT),
    ),
    added=(AddedFile("flash_attn/cute/xstage_probe.py", "fa4/flash_attn/cute/xstage_probe.py"),),
    flags={"XSTAGE_TRACE": "{on}", "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0", "CUTE_DSL_KEEP_PTX": "1"},
    build_notes=(
        "No build: the DSL compiles at first call. XSTAGE_TRACE must be set before flash_attn.cute is imported (the "
        "flag is read at import and folded by const_expr); keep the on-disk DSL cache off or point "
        "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR at a separate folder; CUTE_DSL_KEEP_PTX=1 keeps the PTX to check that "
        "the clock reads survive (mov.u64 %clock64)."),
    buffer_plumbing=(
        "the last of aux_tensors: an int64 tensor (num_ctas, capacity, 4) the caller allocates and passes in "
        "flash_attn_func(..., aux_tensors=[..., records]); the kernel already receives aux tensors (AuxData) and keys "
        "its compile cache on their metadata."),
)
