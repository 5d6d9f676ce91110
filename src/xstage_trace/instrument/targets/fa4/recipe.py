"""``fa4``: FlashAttention-4 (CuTe DSL, ``flash_attn/cute``) forward on sm_90: per output tile the
clock at tile start, after the Q-tile mainloop and after the epilogue, behind a compile-time flag."""

from __future__ import annotations

from pathlib import Path

from xstage_trace.instrument.recipes.model import AddedFile, Anchor, Event, Recipe
from xstage_trace.instrument.targets.fa3.recipe import UPSTREAM

_F = "flash_attn/cute/flash_fwd_sm90.py"
_MMA = r"^    def mma\("
_NEXT = r"^    def first_half_block_overlap\("

RECIPE = Recipe(
    name="fa4",
    files=Path(__file__).resolve().parent / "files",
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
        Anchor("tile_begin", _F, r"^[ \t]*m_block, head_idx, batch_idx, _ = work_tile\.tile_idx\n", "after",
               "xstage_probe.tile_begin(aux_tensors, tidx, m_block, head_idx, batch_idx)",
               "m_block, head_idx, batch_idx, _ = work_tile.tile_idx", after=_MMA, until=_NEXT),
        Anchor("mainloop_end", _F, r"^[ \t]*self\.epilogue\(\n", "before",
               "xstage_probe.mainloop_end(aux_tensors, tidx, m_block, head_idx, batch_idx)",
               "self.epilogue(", after=_MMA, until=_NEXT),
        Anchor("tile_end", _F, r"^[ \t]*tile_scheduler\.advance_to_next_work\(\)\n", "before",
               "xstage_probe.tile_end(aux_tensors, tidx, m_block, head_idx, batch_idx)",
               "tile_scheduler.advance_to_next_work()", after=_MMA, until=_NEXT),
    ),
    added=(AddedFile("flash_attn/cute/xstage_probe.py", "flash_attn/cute/xstage_probe.py"),),
    flags={"XSTAGE_TRACE": "{on}", "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0", "CUTE_DSL_KEEP": "ptx,cubin"},
    build_notes=(
        "No build: the DSL compiles at first call. XSTAGE_TRACE must be set before flash_attn.cute is imported (the "
        "flag is read at import and folded by const_expr); keep the on-disk DSL cache off or point "
        "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR at a separate folder; CUTE_DSL_KEEP=ptx,cubin keeps the PTX and cubin (in "
        "CUTE_DSL_DUMP_DIR) to check that the clock reads survive (CS2R SR_CLOCKLO in the SASS). The DSL compiles without "
        "a GPU (CUTE_DSL_ARCH=sm_90a, torch FakeTensorMode): sample_traces/h200_fa4/run/compile_check.py."),
    buffer_plumbing=(
        "the last of aux_tensors: an int64 tensor (batch, heads, m_blocks, 8), zeroed, that the caller allocates and passes in "
        "flash_attn_func(..., aux_tensors=[..., records]); the kernel already receives aux tensors (AuxData) and keys "
        "its compile cache on their metadata."),
)
