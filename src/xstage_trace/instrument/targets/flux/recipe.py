"""``flux``: FLUX (bytedance/flux) GEMM + reduce-scatter: the sm80 scatter epilogue's remote-store
span (VisitorAuxStoreScatter) and, on sm90, the MoE GatherRS communication CTAs' wait for GEMM
tiles (the reduce-and-store work is the gap to the next wait)."""

from __future__ import annotations

from pathlib import Path

from xstage_trace.instrument.recipes.model import AddedFile, Anchor, Event, Recipe, Upstream

UPSTREAM = Upstream("bytedance/flux", "19831ca2d820e3e782ed1d15d8b52d0898b78b26", "2025-08-28",
                    "remove install_deps.sh: CUTLASS 4.0 does not need the patch; and nvshmem install by pip (#163)")

_EVT = "src/gemm_rs/epilogue_evt.hpp"
_GRS = "src/moe_gather_rs/sm90_gemm_array_threadblock_specialized.hpp"
_VIS = r"struct VisitorAuxStoreScatter \{"
_NS = "::bytedance::flux::xstage_flux"

RECIPE = Recipe(
    name="flux",
    files=Path(__file__).resolve().parent / "files",
    title="FLUX GEMM-RS: sm80 scatter epilogue (remote stores) and sm90 MoE GatherRS comm CTAs",
    architectures=("sm_80", "sm_90a"),
    upstream=(UPSTREAM,),
    sentinel=(_EVT, _GRS, "src/pybind/ths_op.cc"),
    roles=("cta: lane 0 of warp 0 of each CTA (one slice per CTA of the grid)",),
    events=(
        Event(0, "rs_store", "span", "cta", "",
              "sm80: first epilogue step to end_epilogue: the tile's scatter stores to the peer ranks (before the flags)"),
        Event(1, "wait", "span", "cta", "",
              "sm90 GatherRS: the comm CTA waits (Barrier::wait_eq) for the GEMM tiles of split `tile`"),
    ),
    anchors=(
        Anchor("evt.include", _EVT, r'^#include\s*"gemm_rs/reduce_scatter_barrier_struct\.hpp"\n', "after",
               '#include "xstage_flux.h"', '#include "gemm_rs/reduce_scatter_barrier_struct.hpp"'),
        Anchor("evt.params_field", _EVT, r"^[ \t]*int n_split;\n(?=[ \t]*\};)", "after", "::xstage::DeviceBuffer xstage_buf;",
               "int n_split;\n};", after=_VIS, until=r"^\};"),
        Anchor("evt.params_fill", _EVT, r"^[ \t]*params\.rank = args\.rank;\n", "after",
               f"params.xstage_buf = {_NS}::current();", "params.rank = args.rank;", after=_VIS, until=r"^\};"),
        Anchor("evt.probe_member", _EVT, r"^[ \t]*int col_stride\[MAX_RANK_SIZE\];\n", "after", "XSTAGE_FLUX_PROBE_MEMBER",
               "int col_stride[MAX_RANK_SIZE];", after=_VIS, until=r"^\};"),
        Anchor("evt.rs_begin", _EVT, r"^[ \t]*begin_step\(int step_idx\) \{\n", "after",
               "XSTAGE_FLUX_RS_BEGIN(params.xstage_buf, step_idx, tile_idx, thread_idx);", "begin_step(int step_idx) {",
               after=_VIS, until=r"^\};", indent=2),
        Anchor("evt.rs_end", _EVT, r"^[ \t]*end_epilogue\(\) \{\n", "after", "XSTAGE_FLUX_RS_END(tile_idx);",
               "end_epilogue() {", after=_VIS, until=r"^\};", indent=2),
        Anchor("grs.include", _GRS, r'^#include\s*"moe_gather_rs/sm90_group_tile_scheduler_threadblock_specialized\.hpp"\n',
               "after", '#include "xstage_flux.h"', '#include "moe_gather_rs/sm90_group_tile_scheduler_threadblock_specialized.hpp"'),
        Anchor("grs.params_field", _GRS, r"^[ \t]*int32_t \*ep_total_token_acc;\n(?=[ \t]*\};)", "after",
               "::xstage::DeviceBuffer xstage_buf;", "int32_t *ep_total_token_acc;\n};", after=r"struct Params \{"),
        Anchor("grs.params_fill", _GRS, r"args\.ep_total_token_acc(?P<at>)\};", "replace", f", {_NS}::current()",
               "args.ep_total_token_acc};"),
        Anchor("grs.probe_member", _GRS, r"^[ \t]*static constexpr int GAHER_RS_N_CTAS = GAHER_RS_N_CTAS_;\n", "after",
               "XSTAGE_FLUX_PROBE_MEMBER", "static constexpr int GAHER_RS_N_CTAS = GAHER_RS_N_CTAS_;"),
        Anchor("grs.comm_open", _GRS, r"^[ \t]*if \(blockIdx\.x \+ GAHER_RS_N_CTAS >= gridDim\.x\) \{\n", "after",
               "XSTAGE_FLUX_OPEN(params.xstage_buf, threadIdx.x / 32 == 0);",
               "if (blockIdx.x + GAHER_RS_N_CTAS >= gridDim.x) {", indent=2),
        Anchor("grs.comm_close", _GRS, r"^#endif\n(?=[ \t]*return;\n)", "after", "XSTAGE_PROBE_CLOSE();",
               "#endif\n      return;", indent=6),
        Anchor("grs.wait_begin", _GRS, r"^[ \t]*Barrier::wait_eq\(barrier, threadIdx\.x, sid, wait_flag\);\n", "before",
               f"XSTAGE_BEGIN({_NS}::kEvWait, static_cast<::xstage::u32>(sid));",
               "Barrier::wait_eq(barrier, threadIdx.x, sid, wait_flag);", count=4),
        Anchor("grs.wait_end", _GRS, r"^[ \t]*Barrier::wait_eq\(barrier, threadIdx\.x, sid, wait_flag\);\n", "after",
               f"XSTAGE_END({_NS}::kEvWait, static_cast<::xstage::u32>(sid));",
               "Barrier::wait_eq(barrier, threadIdx.x, sid, wait_flag);", count=4),
        Anchor("api.setter", "src/pybind/ths_op.cc", r'^#include\s*"flux/ths_op/util\.h"\n', "after",
               '#include "xstage_flux_api.h"', '#include "flux/ths_op/util.h"'),
    ),
    added=(
        AddedFile("src/xstage/probe.cuh", "<xstage/probe.cuh>"),
        AddedFile("src/xstage_flux.h", "src/xstage_flux.h"),
        AddedFile("src/xstage_flux_api.h", "src/xstage_flux_api.h"),
    ),
    flags={"CUDAFLAGS": "{trace}", "NVCC_APPEND_FLAGS": "{trace}", "GPU_SM_CORES": "132"},
    build_notes=(
        "`./build.sh --arch 90` (or 80) with these variables before the first cmake configure (CMake seeds "
        "CMAKE_CUDA_FLAGS from CUDAFLAGS; FLUX_BUILD_SKIP_CMAKE must be unset); CUDA 13 needs -I$CUDA_HOME/include/cccl "
        "for cutlass v3.8. Kernels are AOT-instantiated: switching the probes is a full rebuild (tens of minutes)."),
    buffer_plumbing=(
        "Params field `xstage::DeviceBuffer xstage_buf` (ours) in VisitorAuxStoreScatter and the GatherRS kernel, "
        "filled in to_underlying_arguments from xstage_flux::current(), set by the extern \"C\" "
        "xstage_flux_set_trace_buffer exported from the ths_op library before the op builds its arguments; "
        "ProbeBuffer.reset() before each launch: each sm80 epilogue resumes its CTA's slice from the count stored at "
        "the previous one's close (cutlass builds the callbacks per tile)."),
)
