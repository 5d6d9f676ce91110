#!/usr/bin/env bash
# Compile DeepGEMM's sm_100 Mega MoE kernels as its JIT would (one instantiation per TU, the JIT's
# flags, sm_100f), in a tree patched by `xstage-trace instrument apply --target deepgemm-megamoe`:
# upstream (reverted), probes on and probes off; prints ptxas registers / spills per kernel.
#   usage: deepgemm_megamoe.sh DEEPGEMM_ROOT [XSTAGE_TRACE_CLI]
# Needs nvcc >= 12.9 (sm_100f), cuobjdump + nvdisasm on PATH. Leaves the recipe applied, probes off.
set -euo pipefail
root=$(realpath "$1"); cli=${2:-xstage-trace}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# One prefill-like configuration: 512 tokens per rank, 8 ranks, hidden 4096, intermediate 2048,
# 256 experts, top-8, 4 experts per wave, BLOCK_N 128, store block 32, 148 SMs (BLOCK_K 128 FP8,
# 64 BF16; hidden 7168 fails the combine stage's shared-memory static assert at this block size).
cfg="512, 4096, 2048, 256, 8, 4, 128, 128, 128, 32, 128, 128, 16384, 16384, 4, 4096, 128, 128, 256, 148, 8, cute::numeric_limits<float>::infinity(), true"
for k in sm100_fp8_fp4_mega_moe sm100_bf16_mega_moe; do
  args=$cfg
  [ $k = sm100_bf16_mega_moe ] && args="512, 4096, 2048, 256, 8, 4, 128, 128, 64, 32, 16384, 4, 4096, 128, 128, 256, 148, 8, cute::numeric_limits<float>::infinity(), true"
  printf '#include <deep_gemm/impls/%s.cuh>\nusing namespace deep_gemm;\nstatic void __instantiate_kernel() {\n    auto ptr = reinterpret_cast<void*>(&%s_impl<%s>);\n}\n' "$k" "$k" "$args" > "$work/$k.cu"
done
flags="-std=c++20 --diag-suppress=39,161,174,177,186,940 --ptxas-options=--register-usage-level=10,--verbose,--warn-on-local-memory-usage -I$root/deep_gemm/include -I$root/third-party/cutlass/include --gpu-architecture=sm_100f --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi -O3 --expt-relaxed-constexpr --expt-extended-lambda -cubin"
for mode in upstream trace no-trace; do
  if [ $mode = upstream ]; then
    "$cli" instrument apply --target deepgemm-megamoe --src "$root" --revert >/dev/null 2>&1 || true
  else
    "$cli" instrument apply --target deepgemm-megamoe --src "$root" --$mode >/dev/null
  fi
  for tu in "$work"/*.cu; do
    n=$(basename "$tu" .cu); t0=$(date +%s.%N)
    nvcc $flags "$tu" -o "$work/$n.$mode.cubin" > "$work/$n.$mode.log" 2>&1 || { cat "$work/$n.$mode.log"; exit 1; }
    t1=$(date +%s.%N)
    regs=$(grep -o 'Used [0-9]* registers' "$work/$n.$mode.log" | head -1)
    spill=$(grep -o '[0-9]* bytes spill stores, [0-9]* bytes spill loads' "$work/$n.$mode.log" | head -1)
    cuobjdump -sass "$work/$n.$mode.cubin" > "$work/$n.$mode.sass"
    clk=$(grep -c 'SR_CLOCK' "$work/$n.$mode.sass" || true)
    ninstr=$(grep -cE '^\s+/\*[0-9a-f]{4,}\*/' "$work/$n.$mode.sass" || true)
    printf '%-24s %-9s %s, %s, %s clock reads, %s SASS instructions, %.1f s\n' "$n" "$mode" "$regs" "$spill" "$clk" \
      "$ninstr" "$(echo "$t1 - $t0" | bc)"
  done
done
