"""``deepgemm-megamoe``: DeepGEMM's sm_100 Mega MoE kernels (FP8xFP4 and BF16): the MMA issue
warp's per-block mainloop, the epilogue's accumulator wait and store span (Linear-2: stores to
the peer ranks over NVLink) and the NVLink barrier."""

from __future__ import annotations

from pathlib import Path

from xstage_trace.instrument.recipes.deepgemm_common import (IMPLS as _IMPLS, UPSTREAM, added_files, jit_flags, kernel_param_anchor,
                                                            launcher_anchors, python_api_anchors, switch)
from xstage_trace.instrument.recipes.model import Anchor, Event, Recipe
_NS = "::xstage::megamoe"
_TILE = f"{_NS}::tile_id(m_block_idx, n_block_idx)"
_MMA = r"warp_idx == kNumDispatchWarps \+ 2\)"
_AFTER_MMA = r"warp_idx == kNumDispatchWarps \+ 3\)"
_EPI = r"warp_idx >= kNumDispatchWarps \+ kNumMMANonEpilogueWarps\)"


def _anchors(key: str, stem: str) -> list[Anchor]:
    f = f"{_IMPLS}/{stem}.cuh"
    return [
        Anchor(f"{key}.include", f, r"^#include\s*<deep_gemm/scheduler/mega_moe\.cuh>\n", "after",
               "#include <deep_gemm/xstage_megamoe/trace.cuh>", "#include <deep_gemm/scheduler/mega_moe.cuh>"),
        kernel_param_anchor(key, stem, f"{stem}_impl(void* y, ..., const __grid_constant__ cute::TmaDescriptor tensor_map_l2_weights_sf) {{"),
        Anchor(f"{key}.mma_open", f, r"^[ \t]*if \(is_leader_cta\) \{\n", "after",
               f"XSTAGE_PROBE_OPEN(xstage_buf, {_NS}::kRoleMma);", "if (is_leader_cta) {",
               after=_MMA, until=r"make_instr_desc", indent=4),
        Anchor(f"{key}.mainloop_begin", f, r"^[ \t]*ptx::tcgen05_after_thread_sync\(\);\n", "after",
               f"XSTAGE_BEGIN({_NS}::kEvMainloop, {_TILE});", "ptx::tcgen05_after_thread_sync();",
               after=_MMA, until=r"for \(uint32_t k_block_idx = 0; k_block_idx < num_k_blocks"),
        Anchor(f"{key}.mainloop_end", f,
               r"^[ \t]*empty_barrier_arrive\(k_block_idx == num_k_blocks - 1\);\n[ \t]*\}\n", "after",
               f"XSTAGE_END_P({_NS}::kEvMainloop, {_TILE}, {_NS}::block_payload(block_phase, local_expert_idx));",
               "empty_barrier_arrive(k_block_idx == num_k_blocks - 1);\n}", after=_MMA, until=_AFTER_MMA),
        Anchor(f"{key}.mma_close", f, r"^[ \t]*if \(current_iter_idx > 0\) \{\n", "before", "XSTAGE_PROBE_CLOSE();",
               "if (current_iter_idx > 0) {", after=_MMA, until=_AFTER_MMA),
        Anchor(f"{key}.epilogue_open", f, r"^[ \t]*const auto warp_idx_in_wg = epilogue_warp_idx % 4;\n", "after",
               f"XSTAGE_PROBE_OPEN_IF(xstage_buf, {_NS}::kRoleEpilogue, epilogue_warp_idx == 0);",
               "const auto warp_idx_in_wg = epilogue_warp_idx % 4;", after=_EPI),
        Anchor(f"{key}.tmem_wait_begin", f,
               r"^[ \t]*shared_storage\.tmem_full_barriers\[accum_stage_idx\]\.wait\(accum_phase\);\n", "before",
               f"XSTAGE_BEGIN({_NS}::kEvTmemFullWait, {_TILE});",
               "shared_storage.tmem_full_barriers[accum_stage_idx].wait(accum_phase);", after=_EPI),
        Anchor(f"{key}.tmem_wait_end", f,
               r"^[ \t]*shared_storage\.tmem_full_barriers\[accum_stage_idx\]\.wait\(accum_phase\);\n"
               r"[ \t]*ptx::tcgen05_after_thread_sync\(\);\n", "after",
               f"XSTAGE_END({_NS}::kEvTmemFullWait, {_TILE});\nXSTAGE_BEGIN({_NS}::kEvEpilogue, {_TILE});",
               "shared_storage.tmem_full_barriers[accum_stage_idx].wait(accum_phase);\nptx::tcgen05_after_thread_sync();",
               after=_EPI),
        Anchor(f"{key}.epilogue_end", f,
               r"^[ \t]*\}\);\n(?=(?:[ \t]*\n|[ \t]*//[^\n]*\n|[ \t]*if \(epilogue_warp_idx == 0\)\n)*"
               r"[ \t]*Allocator\(\)\.free\(0, kNumTmemCols\);)", "before",
               f"XSTAGE_END_P({_NS}::kEvEpilogue, {_TILE}, {_NS}::block_payload(block_phase, local_expert_idx));",
               "});\n\n// Deallocate tensor memory\nif (epilogue_warp_idx == 0)\n    Allocator().free(0, kNumTmemCols);",
               after=_EPI, indent=4),
        Anchor(f"{key}.nvlink_begin", f, r"^[ \t]*comm::nvlink_barrier<kNumRanks, kNumSMs, kNumEpilogueThreads,\n", "before",
               f"XSTAGE_BEGIN({_NS}::kEvNvlinkBarrier, 0u);",
               "comm::nvlink_barrier<kNumRanks, kNumSMs, kNumEpilogueThreads,", after=_EPI),
        Anchor(f"{key}.nvlink_end", f,
               r"^[ \t]*comm::nvlink_barrier<kNumRanks, kNumSMs, kNumEpilogueThreads,\n[\s\S]*?\n[ \t]*\);\n", "after",
               f"XSTAGE_END({_NS}::kEvNvlinkBarrier, 0u);\nXSTAGE_PROBE_CLOSE();",
               "comm::nvlink_barrier<...>(\n    workspace, sym_buffer, sm_idx, epilogue_thread_idx, ...\n);", after=_EPI),
        *launcher_anchors(key, stem, "megamoe_trace_buffer.hpp", "xstage_trace_megamoe",
                          "DG_CUDA_UNIFIED_CHECK(launch_kernel(kernel, config, ...));"),
    ]


RECIPE = Recipe(
    name="deepgemm-megamoe",
    files=Path(__file__).resolve().parent / "files",
    title="DeepGEMM sm_100 Mega MoE (FP8xFP4 and BF16): MMA mainloop, epilogue (Linear-2 NVLink stores), NVLink barrier",
    architectures=("sm_100a", "sm_100f"),
    upstream=(UPSTREAM,),
    sentinel=(f"{_IMPLS}/sm100_fp8_fp4_mega_moe.cuh", "csrc/python_api.cpp"),
    roles=("mma: lane 0 of the MMA issue warp (leader CTA of the 2-CTA pair)", "epilogue: lane 0 of epilogue warp 0"),
    events=(
        Event(0, "mainloop", "span", "mma", "phase<<16 | local expert",
              "accumulator slot acquired to the block's last UMMA issued (issue, not completion)"),
        Event(1, "tmem_full_wait", "span", "epilogue", "", "the epilogue waits for the block's accumulator (UMMA done)"),
        Event(2, "epilogue", "span", "epilogue", "phase<<16 | local expert",
              "accumulator to stores; in Linear-2 (phase 1) the stores go to the peer ranks over NVLink"),
        Event(3, "nvlink_barrier", "span", "epilogue", "", "grid sync + cross-rank signal before the combine"),
    ),
    anchors=tuple(a for k in (("fp8_fp4", "sm100_fp8_fp4_mega_moe"), ("bf16", "sm100_bf16_mega_moe"))
                  for a in _anchors(*k)) + python_api_anchors("megamoe_trace_buffer.hpp", "xstage_trace_megamoe"),
    added=added_files("xstage_megamoe", "trace.cuh", "megamoe_trace_buffer.hpp"),
    switch=switch("xstage_megamoe"),
    conflicts=("deepgemm-sm90",),
    flags=jit_flags("$HOME/.deep_gemm-xstage-megamoe"),
    build_notes=(
        "sm_100 only (csrc/apis/mega.hpp accepts arch 10). The switch is deep_gemm/include/deep_gemm/xstage_megamoe/"
        "config.cuh (apply --trace / --no-trace); rebuild and reinstall the package once for the patched launchers. "
        "Apply one DeepGEMM recipe at a time (both add a probe header to the single _C translation unit)."),
    buffer_plumbing=(
        "kernel argument, as deepgemm-sm90: last parameter `const xstage::DeviceBuffer xstage_buf`, passed by the "
        "patched launchers from `deep_gemm._C.xstage_set_megamoe_trace_buffer(...)` (roles_per_cta >= 2)."),
)
