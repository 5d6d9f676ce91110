#!/usr/bin/env bash
# Registers, spills, clock reads and SASS instructions (upstream / probes on / probes off) of the kernel
# configurations bench.py's cases ran: DeepGEMM's sm90 heuristic by hand for these shapes (1d2d, bf16 D,
# 132 SMs): m-grouped contiguous 8 groups -> BLOCK 128 x 192 x 128, swizzle 128/128/128, 4 stages, 256 math
# threads (multicast 1 and 2 on A: the run's profiler name stops before them); fp8_gemm_nt k2048 ->
# 256 x 128 x 128, 3 stages. The functions are the compile check's (src/xstage_trace/instrument/recipes/deepgemm_common.sh).
#   usage: compile_run_configs.sh DEEPGEMM_ROOT [XSTAGE_TRACE_CLI]   (cuobjdump + nvdisasm on PATH)
# Leaves the tree with the recipe applied and the probes switched off.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../src/xstage_trace/instrument/recipes/deepgemm_common.sh"
dg_setup "$@"
dg_instantiate contig_128x192_mc1 sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 7168, 8, 128, 192, 128, 128, 128, 128, 4, 128, 256, 1, false, 132, GemmType::MGroupedContiguous, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
dg_instantiate contig_128x192_mc2a sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 7168, 8, 128, 192, 128, 128, 128, 128, 4, 128, 256, 2, true, 132, GemmType::MGroupedContiguous, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
dg_instantiate normal_256x128_k2048 sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 7168, 2048, 1, 256, 128, 128, 128, 128, 128, 3, 128, 256, 1, false, 132, GemmType::Normal, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
dg_compile_modes deepgemm-sm90 sm_90a 22
