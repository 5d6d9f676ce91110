"""``deepgemm-sm90``: DeepGEMM's Hopper GEMMs (FP8 1d2d and 1d1d, BF16; normal and m-grouped
contiguous/masked run through the same three kernels)."""

from __future__ import annotations

from pathlib import Path

from xstage_trace.instrument.recipes.deepgemm_common import (IMPLS as _IMPLS, UPSTREAM, added_files, jit_flags, kernel_param_anchor,
                                                            launcher_anchors, python_api_anchors, switch)
from xstage_trace.instrument.recipes.model import Anchor, Event, Recipe
_DEALLOC = r"warpgroup_reg_dealloc<\s*kNumTMARegisters\s*>\(\);"
_ALLOC = r"warpgroup_reg_alloc<\s*kNumMathRegisters\s*>\(\);"
_TILE = "::xstage::dg::tile_id(m_block_idx, n_block_idx)"
_ITER = "scheduler.current_iter"  # the tile loop's iteration (0-based); after the loop: the tiles it ran

# (anchor prefix, kernel header, kernel function, launcher header, bytes of one stored tile)
_KERNELS = (
    ("fp8_1d2d", "sm90_fp8_gemm_1d2d", "BLOCK_M * BLOCK_N * sizeof(cd_dtype_t)"),
    ("fp8_1d1d", "sm90_fp8_gemm_1d1d", "BLOCK_M * BLOCK_N * sizeof(float)"),
    ("bf16", "sm90_bf16_gemm", "BLOCK_M * BLOCK_N * sizeof(cd_dtype_t)"),
)


def _kernel_anchors(key: str, stem: str, tile_bytes: str) -> list[Anchor]:
    f = f"{_IMPLS}/{stem}.cuh"
    return [
        Anchor(f"{key}.include", f, r"^#include\s*<deep_gemm/scheduler/gemm\.cuh>\n", "after",
               "#include <deep_gemm/xstage/sm90_trace.cuh>", "#include <deep_gemm/scheduler/gemm.cuh>"),
        kernel_param_anchor(key, stem, f"{stem}_impl(..., const __grid_constant__ cute::TmaDescriptor tensor_map_d) {{"),
        Anchor(f"{key}.producer_open", f,
               r"^[ \t]*if\s*\(warp_idx == kNumMathThreads / 32(?: \+ 2)? and cute::elect_one_sync\(\)\)\s*\{\n",
               "after", "XSTAGE_PROBE_OPEN_ELECTED(xstage_buf, ::xstage::dg::kRoleProducer);",
               "if (warp_idx == kNumMathThreads / 32 + 2 and cute::elect_one_sync()) {",
               after=_DEALLOC, until=_ALLOC, indent=4),
        Anchor(f"{key}.producer_schedule", f,
               r"^[ \t]*while\s*\(scheduler\.get_next_block\(m_block_idx,\s*n_block_idx\)\)\s*\{\n", "after",
               f"XSTAGE_MARK(::xstage::dg::kEvSchedule, {_TILE}, scheduler.current_group_idx);",
               "while (scheduler.get_next_block(m_block_idx, n_block_idx)) {",
               after=_DEALLOC, until=_ALLOC, indent=4),
        Anchor(f"{key}.producer_close", f, r"^[ \t]*\}\n[ \t]*\} else \{\n", "before", "XSTAGE_PROBE_CLOSE();",
               "}\n} else {", after=_DEALLOC, until=_ALLOC, indent=4),
        Anchor(f"{key}.math_open", f, rf"^[ \t]*cutlass::arch::{_ALLOC}\n", "after",
               "XSTAGE_DG_MATH_OPEN(xstage_buf);",
               "cutlass::arch::warpgroup_reg_alloc<kNumMathRegisters>();"),
        Anchor(f"{key}.store_wait_begin", f, r"^[ \t]*if\s*\([^\n]*\)\n[ \t]*cute::tma_store_wait<0>\(\);\n", "before",
               "XSTAGE_DG_CLOCK(xstage_mainloop_end_);",
               "if (threadIdx.x < BLOCK_N / TMA_D_BLOCK_N)\n    cute::tma_store_wait<0>();"),
        Anchor(f"{key}.store_wait_end", f,
               r"^[ \t]*cute::tma_store_wait<0>\(\);\n[ \t]*cutlass::arch::NamedBarrier::sync\([^;\n]*\);\n", "after",
               "XSTAGE_DG_CLOCK(xstage_store_done_);",
               "cute::tma_store_wait<0>();\ncutlass::arch::NamedBarrier::sync(kNumWGMMAStoreThreads, 1);"),
        Anchor(f"{key}.epilogue_end", f, r"^[ \t]*cute::tma_store_arrive\(\);\n[ \t]*\}\n[ \t]*__syncwarp\(\);\n", "after",
               f"XSTAGE_DG_TILE_END({_ITER}, {_TILE}, {tile_bytes}, xstage_mainloop_end_, xstage_store_done_);",
               "cute::tma_store_arrive();\n}\n__syncwarp();"),
        Anchor(f"{key}.math_close", f, r"^[ \t]*__syncwarp\(\);\n[ \t]*\}\n(?=[ \t]*\}\n#else)", "after",
               f"XSTAGE_DG_MATH_CLOSE({_ITER});", "__syncwarp();\n}\n}\n#else"),
        *launcher_anchors(key, stem, "trace_buffer.hpp", "xstage_trace",
                          "DG_CUDA_UNIFIED_CHECK(launch_kernel(kernel, config, ..., args.tensor_map_d));"),
    ]


RECIPE = Recipe(
    name="deepgemm-sm90",
    files=Path(__file__).resolve().parent / "files",
    title="DeepGEMM sm_90 GEMMs: FP8 1d2d/1d1d, BF16 (normal, m-grouped contiguous/masked)",
    architectures=("sm_90a",),
    upstream=(UPSTREAM,),
    sentinel=(f"{_IMPLS}/sm90_fp8_gemm_1d2d.cuh", "csrc/python_api.cpp"),
    roles=("math: lane 0 of math warp 0 (tile loop of the WGMMA warpgroups)",
           "producer: the elected lane of the TMA-load warp (scheduler order)"),
    events=(
        Event(0, "mainloop", "span", "math", "",
              "from the previous tile's epilogue end (the first tile: the role's open; so the scheduler step and the "
              "B-scale load are in it) to the last k-block's WGMMA retired and promoted"),
        Event(1, "store_wait", "span", "math", "",
              "tma_store_wait<0> on the previous tile's TMA store plus the named barrier: the staging-slot wait (docs/model.md §5)"),
        Event(2, "epilogue", "span", "math", "tile bytes",
              "accumulators to shared memory (STSM) and TMA store issued; completion shows as the next store_wait"),
        Event(3, "schedule", "mark", "producer", "group index", "the producer took tile (m<<16|n): scheduler order"),
    ),
    anchors=tuple(a for k in _KERNELS for a in _kernel_anchors(*k)) + python_api_anchors("trace_buffer.hpp", "xstage_trace"),
    added=added_files("xstage", "sm90_trace.cuh", "trace_buffer.hpp"),
    switch=switch("xstage"),
    conflicts=("deepgemm-megamoe",),
    flags=jit_flags("$HOME/.deep_gemm-xstage"),
    build_notes=(
        "The switch is deep_gemm/include/deep_gemm/xstage/config.cuh (apply --trace / --no-trace): DeepGEMM's JIT takes "
        "no extra compiler flags but hashes every <deep_gemm/...> header, so switching recompiles the kernels. "
        "The launchers and python_api.cpp are patched too: rebuild and reinstall the package once "
        "(`python setup.py install` or `pip install --no-build-isolation .`; `_C` is one translation unit). "
        "Apply one DeepGEMM recipe at a time (both add a probe header to that translation unit)."),
    buffer_plumbing=(
        "kernel argument: each kernel gains a last parameter `const xstage::DeviceBuffer xstage_buf`; each launcher "
        "passes `xstage_trace::current()`, set from Python by `deep_gemm._C.xstage_set_trace_buffer(*ProbeBuffer("
        "num_ctas=num_sms, roles_per_cta=2, capacity=...).device_fields())`; cleared, the probes write nothing."),
)
