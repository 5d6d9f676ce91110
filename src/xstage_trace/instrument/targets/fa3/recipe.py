"""``fa3``: FlashAttention-3 forward on Hopper (``hopper/``): per output tile the Q-tile loop
(mainloop: QK^T, online softmax, PV over the K/V blocks) and the epilogue (O store through TMA);
the tile order of each CTA's consumer slice is the scheduler order."""

from __future__ import annotations

from pathlib import Path

from xstage_trace.instrument.recipes.model import AddedFile, Anchor, Event, Recipe, Upstream

UPSTREAM = Upstream("Dao-AILab/flash-attention", "0251105a2fb19d2957484b7f023cd8c115286ced", "2026-08-15",
                    "[CuTe] Relax CUTLASS DSL requirement (#2798)")

_K = "hopper/flash_fwd_kernel_sm90.h"
_M = "hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp"
_E = "hopper/epilogue_fwd.hpp"
_NS = "flash::xstage_fa3"
_CONSUMER = r"warpgroup_reg_alloc<\s*MmaRegisterRequirement\s*>\(\);"
_TILE = f"{_NS}::tile_id(block_coord)"
# the writer's state (a field of ours in shared storage); at open and close also the buffer and the writer thread
# (the first consumer thread). XSTAGE_FA3_OPEN declares the writer flag the three tile-loop sites test.
_STATE = "shared_storage.pipelines.xstage_writer_state"
_BUF = f"params.epilogue.xstage_buf, MmaThreadOffset, {_STATE}"

RECIPE = Recipe(
    name="fa3",
    files=Path(__file__).resolve().parent / "files",
    title="FlashAttention-3 forward, sm_90 (hopper/): Q-tile mainloop and O epilogue per output tile",
    architectures=("sm_90a",),
    upstream=(UPSTREAM,),
    sentinel=(_K, _M, _E, "hopper/flash_api.cpp"),
    roles=("consumer: the first consumer thread (lane 0 of the first MMA warp; tile loop of the MMA warpgroups)",),
    events=(
        Event(0, "mainloop", "span", "consumer", "", "the Q tile's loop over K/V blocks: QK^T, online softmax, PV"),
        Event(1, "epilogue", "span", "consumer", "",
              "O to shared memory, TMA store issued and waited (store or store_zero)"),
        Event(2, "kv_step", "span", "consumer", "K/V block index (begin and end)",
              "the online softmax's step of one K/V block in the writer's warpgroup: from its mark (its QK^T GEMM issued, "
              "the previous block's V arrived) to the next block's (the last block's: to the K/V loop's exit; the first "
              "block's starts at the mainloop's begin), so it holds the block's QK^T wait, softmax (row max, exp, row sum, "
              "O rescale) and the next block's K/V waits; the tile's last 16 blocks (all when it has no more), in the order "
              "they ran, inside the tile's mainloop span; only with -DXSTAGE_FA3_KV_STEPS=1 (off by default) and only on each "
              "CTA's tiles 0, S, 2S, ... (S = -DXSTAGE_FA3_KV_EVERY, default 8, the payload of every mainloop begin record)"),
    ),
    anchors=(
        Anchor("kernel.include", _K, r'^#include\s*"softmax\.h"\n', "after", '#include "xstage_fa3.h"', '#include "softmax.h"'),
        Anchor("kernel.smem_count", _K, r"^[ \t]*alignas\(16\) typename TileScheduler::SharedStorage smem_scheduler;\n(?=[ \t]*\} pipelines;)",
               "after", "XSTAGE_FA3_SMEM_FIELD", "alignas(16) typename TileScheduler::SharedStorage smem_scheduler;\n} pipelines;"),
        Anchor("kernel.consumer_open", _K, rf"^[ \t]*cutlass::arch::{_CONSUMER}\n", "after",
               f"XSTAGE_FA3_OPEN({_BUF});",
               "cutlass::arch::warpgroup_reg_alloc<MmaRegisterRequirement>();"),
        # the writer flag lent to the mainloop object, whose softmax sites inside `mma` test it
        Anchor("kernel.mainloop_flag", _K, r"^[ \t]*mainloop\.mma_init\(\);\n", "after", "XSTAGE_FA3_LEND_FLAG(mainloop);",
               "mainloop.mma_init();", after=_CONSUMER),
        Anchor("kernel.mainloop_begin", _K, r"^[ \t]*if constexpr \(!LargeHeadDimV\) \{\n[ \t]*tile_valid = mainloop\.mma\(", "before",
               f"XSTAGE_FA3_BEGIN({_STATE}, {_NS}::kEvMainloop, {_TILE});",
               "if constexpr (!LargeHeadDimV) {\n    tile_valid = mainloop.mma(", after=_CONSUMER),
        # the mainloop's end and the epilogue's begin are one clock read, stamped after the scheduler's get_next_work
        # (the Q-loop span holds the consumer's fetch of its next tile); their records are written at the epilogue's end
        Anchor("kernel.span_switch", _K, r"^[ \t]*if \(tile_valid\) \{\n", "before",
               f"XSTAGE_FA3_SPAN_STAMP({_STATE});", "if (tile_valid) {",
               after=r"get_next_work</\*IsProducerWarp=\*/false>\(params\.scheduler, work_tile_info\);"),
        Anchor("kernel.epilogue_end", _K, r"^[ \t]*epilogue\.store_zero\([^;]*\);\n[ \t]*\}\n", "after",
               f"XSTAGE_FA3_END_STAMPED({_STATE}, {_NS}::kEvMainloop, {_NS}::kEvEpilogue, {_NS}::kEvEpilogue, {_TILE});",
               "epilogue.store_zero(params.epilogue, threadIdx.x - MmaThreadOffset, block_coord);\n}", after=_CONSUMER),
        Anchor("kernel.consumer_close", _K, r"^[ \t]*epilogue\.store_tail\(\);\n", "after", f"XSTAGE_FA3_CLOSE({_BUF});",
               "epilogue.store_tail();", after=_CONSUMER),
        Anchor("mainloop.include", _M, r'^#include\s*"utils\.h"\n', "after", '#include "xstage_fa3.h"', '#include "utils.h"'),
        Anchor("mainloop.flag_field", _M, r"^struct CollectiveMainloopFwdSm90 \{\n", "after", "XSTAGE_FA3_MAINLOOP_FIELD",
               "struct CollectiveMainloopFwdSm90 {", indent=4),
        # the K/V steps of the intra-warpgroup-overlap path (FA3's sm_90 forward at head dim 128): block n's mark in
        # fwd_step once its QK^T GEMM is issued and the previous block's V waited for, right before that block's PV
        # GEMM; the loop's exit after both loops (the only spots in and around the loops where a predicated clock read
        # and st.shared leave ptxas's schedule of the K/V loops as it is, docs/recipes.md fa3)
        Anchor("mainloop.kv_mark", _M,
               r"^[ \t]*if \(!UseSchedulerBarrier \|\| warp_group_idx == 0\) \{ consumer_wait\(pipeline_v, smem_pipe_read_v\); \}\n[ \t]*\}\n",
               "after", f"XSTAGE_FA3_KV_MARK({_STATE}, n_block);",
               "if constexpr(!HasQv) {\n    if (!UseSchedulerBarrier || warp_group_idx == 0) { consumer_wait(pipeline_v, smem_pipe_read_v); }\n}",
               after=r"auto fwd_step = \[&\]\(int const n_block, auto mask_fn, auto check_inf_type\) \{\n", until=r"^[ \t]*\};\n"),
        Anchor("mainloop.kv_exit", _M, r"^[ \t]*// Tell producers that smem_q is ready\n", "before", f"XSTAGE_FA3_KV_EXIT({_STATE});",
               "// Tell producers that smem_q is ready",
               after=r"auto fwd_step = \[&\]\(int const n_block, auto mask_fn, auto check_inf_type\) \{\n",
               until=r"No intra-WG overlap"),
        Anchor("epilogue.include", _E, r'^#include\s*"utils\.h"\n', "after", '#include "xstage_fa3.h"', '#include "utils.h"'),
        Anchor("epilogue.field", _E, r"^[ \t]*int const\* seqused = nullptr;\n(?=[ \t]*\};)", "after",
               "::xstage::DeviceBuffer xstage_buf{};", "int const* seqused = nullptr;\n};", count=2),
        Anchor("epilogue.params", _E, r"tma_store_O, args\.cu_seqlens, args\.seqused(?P<at>)\};", "replace",
               ", args.xstage_buf", "tma_store_O, args.cu_seqlens, args.seqused};"),
        Anchor("launch.arg", "hopper/flash_fwd_launch_template.h",
               r"typename CollectiveEpilogue::Arguments epilogue_args \{[^;]*?params\.cu_seqlens_q, params\.seqused_q(?P<at>)\n[ \t]*\};",
               "replace", f", {_NS}::current()",
               "typename CollectiveEpilogue::Arguments epilogue_args {\n    ...,\n    params.cu_seqlens_q, params.seqused_q\n};"),
        # flash_api_stable.cpp is the one built against torch >= 2.9, flash_api.cpp before: patch both
        Anchor("api.setter", "hopper/flash_api*.cpp", r'^#include\s*"cuda_check\.h"\n', "after", '#include "xstage_fa3_api.h"',
               '#include "cuda_check.h"'),
    ),
    added=(
        AddedFile("hopper/xstage/probe.cuh", "<xstage/probe.cuh>"),
        AddedFile("hopper/xstage_fa3.h", "hopper/xstage_fa3.h"),
        AddedFile("hopper/xstage_fa3_api.h", "hopper/xstage_fa3_api.h"),
    ),
    flags={
        "NVCC_APPEND_FLAGS": "{trace}",
        "FLASH_ATTENTION_DISABLE_BACKWARD": "TRUE", "FLASH_ATTENTION_DISABLE_SPLIT": "TRUE",
        "FLASH_ATTENTION_DISABLE_PAGEDKV": "TRUE", "FLASH_ATTENTION_DISABLE_APPENDKV": "TRUE",
        "FLASH_ATTENTION_DISABLE_LOCAL": "TRUE", "FLASH_ATTENTION_DISABLE_SOFTCAP": "TRUE",
        "FLASH_ATTENTION_DISABLE_PACKGQA": "TRUE", "FLASH_ATTENTION_DISABLE_FP16": "TRUE",
        "FLASH_ATTENTION_DISABLE_FP8": "TRUE", "FLASH_ATTENTION_DISABLE_VARLEN": "TRUE",
        "FLASH_ATTENTION_DISABLE_CLUSTER": "TRUE", "FLASH_ATTENTION_DISABLE_HDIM64": "TRUE",
        "FLASH_ATTENTION_DISABLE_HDIM96": "TRUE", "FLASH_ATTENTION_DISABLE_HDIM192": "TRUE",
        "FLASH_ATTENTION_DISABLE_HDIM256": "TRUE", "FLASH_ATTENTION_DISABLE_SM80": "TRUE",
        "FLASH_ATTENTION_DISABLE_HDIMDIFF64": "TRUE", "FLASH_ATTENTION_DISABLE_HDIMDIFF192": "TRUE",
        "MAX_JOBS": "1",
    },
    build_notes=(
        "Reduced FA3 (bf16, head dim 128, forward): `cd hopper && python setup.py install` with these variables; "
        "the probes are switched by -DXSTAGE_TRACE=1 in NVCC_APPEND_FLAGS (nvcc only; the host files need just the "
        "buffer type). The K/V-step events (kv_step) are off by default: add -DXSTAGE_FA3_KV_STEPS=1 to NVCC_APPEND_FLAGS "
        "for them, recorded on every 8th tile of each CTA (-DXSTAGE_FA3_KV_EVERY=S, a power of 2, sets the period; on the "
        "H200 S = 8 costs up to +2.8 % at 1-2 K tokens in HBM, the two spans alone within 1 %; docs/recipes.md). FA3 compiles with "
        "nvcc 13.0; 13.2 has a reported ptxas failure."),
    buffer_plumbing=(
        "epilogue Arguments/Params field `xstage::DeviceBuffer xstage_buf` (ours), filled in the launch template from "
        "flash::xstage_fa3::current(), set by the extern \"C\" xstage_fa3_set_trace_buffer exported from the extension "
        "(ctypes.CDLL(flash_attn_3._C.__file__)); the kernel reads params.epilogue.xstage_buf."),
)
