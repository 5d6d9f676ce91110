#!/usr/bin/env bash
# Compile DeepGEMM's sm_100 Mega MoE kernels as its JIT would (one instantiation per TU, the JIT's
# flags, sm_100f), in a tree patched by `xstage-trace instrument apply --target deepgemm-megamoe`:
# upstream (reverted), probes on and probes off; prints ptxas registers / spills per kernel.
#   usage: compile.sh DEEPGEMM_ROOT [XSTAGE_TRACE_CLI]
# Needs nvcc >= 12.9 (sm_100f), cuobjdump + nvdisasm on PATH. Leaves the recipe applied, probes off.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../recipes/deepgemm_common.sh"
dg_setup "$@"
# One prefill-like configuration: 512 tokens per rank, 8 ranks, hidden 4096, intermediate 2048,
# 256 experts, top-8, 4 experts per wave, BLOCK_N 128, store block 32, 148 SMs (BLOCK_K 128 FP8,
# 64 BF16; hidden 7168 fails the combine stage's shared-memory static assert at this block size).
fp8="512, 4096, 2048, 256, 8, 4, 128, 128, 128, 32, 128, 128, 16384, 16384, 4, 4096, 128, 128, 256, 148, 8, cute::numeric_limits<float>::infinity(), true"
bf16="512, 4096, 2048, 256, 8, 4, 128, 128, 64, 32, 16384, 4, 4096, 128, 128, 256, 148, 8, cute::numeric_limits<float>::infinity(), true"
dg_instantiate sm100_fp8_fp4_mega_moe sm100_fp8_fp4_mega_moe "sm100_fp8_fp4_mega_moe_impl<$fp8>"
dg_instantiate sm100_bf16_mega_moe sm100_bf16_mega_moe "sm100_bf16_mega_moe_impl<$bf16>"
dg_compile_modes deepgemm-megamoe sm_100f 24
