#!/usr/bin/env bash
# Compile DeepGEMM's sm_90 GEMM kernels as its JIT would (one instantiation per TU, the JIT's
# flags), in a DeepGEMM tree patched by `xstage-trace instrument apply --target deepgemm-sm90`,
# with the probes on and off (the switch header), and print ptxas registers / spills per kernel.
#   usage: compile.sh DEEPGEMM_ROOT [XSTAGE_TRACE_CLI]
# Needs nvcc >= 12.3 (sm_90a), cuobjdump + nvdisasm on PATH, DEEPGEMM_ROOT/third-party/cutlass/include.
# Leaves the tree with the recipe applied and the probes switched off.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../recipes/deepgemm_common.sh"
dg_setup "$@"
dg_instantiate fp8_1d2d_normal sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 7168, 1, 128, 128, 128, 128, 128, 128, 5, 128, 256, 1, false, 132, GemmType::Normal, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
dg_instantiate fp8_1d2d_masked sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 7168, 8, 64, 128, 128, 128, 128, 128, 8, 128, 128, 1, false, 132, GemmType::MGroupedMasked, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
dg_instantiate fp8_1d2d_contig sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 7168, 1, 128, 160, 128, 128, 128, 64, 5, 128, 256, 2, true, 132, GemmType::MGroupedContiguous, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
dg_instantiate fp8_1d1d_normal sm90_fp8_gemm_1d1d "sm90_fp8_gemm_1d1d_impl<0, 4096, 7168, 1, 128, 128, 128, 128, 128, 5, 128, 256, 1, false, 132, GemmType::Normal, float>"
dg_instantiate bf16_normal sm90_bf16_gemm "sm90_bf16_gemm_impl<cute::UMMA::Major::K, cute::UMMA::Major::K, 0, 4096, 7168, 1, 128, 128, 64, 128, 128, 128, 4, 128, 256, 1, false, 132, GemmType::Normal, false, cutlass::bfloat16_t>"
# upstream: the tree as checked out (recipe reverted); trace / no-trace: patched, switch on / off
dg_compile_modes deepgemm-sm90 sm_90a 16
