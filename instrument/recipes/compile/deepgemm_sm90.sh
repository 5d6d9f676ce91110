#!/usr/bin/env bash
# Compile DeepGEMM's sm_90 GEMM kernels as its JIT would (one instantiation per TU, the JIT's
# flags), in a DeepGEMM tree patched by `xstage-trace instrument apply --target deepgemm-sm90`,
# with the probes on and off (the switch header), and print ptxas registers / spills per kernel.
#   usage: deepgemm_sm90.sh DEEPGEMM_ROOT [XSTAGE_TRACE_CLI]
# Needs nvcc >= 12.3 (sm_90a), cuobjdump + nvdisasm on PATH, DEEPGEMM_ROOT/third-party/cutlass/include.
# Leaves the tree with the recipe applied and the probes switched off.
set -euo pipefail
root=$(realpath "$1"); cli=${2:-xstage-trace}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
inst() {  # name, header, kernel<args>
  printf '#include <deep_gemm/impls/%s.cuh>\nusing namespace deep_gemm;\nstatic void __instantiate_kernel() {\n    auto ptr = reinterpret_cast<void*>(&%s);\n}\n' "$2" "$3" > "$work/$1.cu"
}
inst fp8_1d2d_normal sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 7168, 1, 128, 128, 128, 128, 128, 128, 5, 128, 256, 1, false, 132, GemmType::Normal, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
inst fp8_1d2d_masked sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 7168, 8, 64, 128, 128, 128, 128, 128, 8, 128, 128, 1, false, 132, GemmType::MGroupedMasked, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
inst fp8_1d2d_contig sm90_fp8_gemm_1d2d "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 7168, 1, 128, 160, 128, 128, 128, 64, 5, 128, 256, 2, true, 132, GemmType::MGroupedContiguous, cutlass::bfloat16_t, epilogue::transform::EpilogueIdentity>"
inst fp8_1d1d_normal sm90_fp8_gemm_1d1d "sm90_fp8_gemm_1d1d_impl<0, 4096, 7168, 1, 128, 128, 128, 128, 128, 5, 128, 256, 1, false, 132, GemmType::Normal, float>"
inst bf16_normal sm90_bf16_gemm "sm90_bf16_gemm_impl<cute::UMMA::Major::K, cute::UMMA::Major::K, 0, 4096, 7168, 1, 128, 128, 64, 128, 128, 128, 4, 128, 256, 1, false, 132, GemmType::Normal, false, cutlass::bfloat16_t>"
flags="-std=c++20 --diag-suppress=39,161,174,177,186,940 --ptxas-options=--register-usage-level=10,--verbose,--warn-on-local-memory-usage -I$root/deep_gemm/include -I$root/third-party/cutlass/include --gpu-architecture=sm_90a --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi -O3 --expt-relaxed-constexpr --expt-extended-lambda -cubin"
# upstream: the tree as checked out (recipe reverted); trace / no-trace: patched, switch on / off
for mode in upstream trace no-trace; do
  if [ $mode = upstream ]; then
    "$cli" instrument apply --target deepgemm-sm90 --src "$root" --revert >/dev/null 2>&1 || true
  else
    "$cli" instrument apply --target deepgemm-sm90 --src "$root" --$mode >/dev/null
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
    printf '%-16s %-9s %s, %s, %s clock reads, %s SASS instructions, %.1f s\n' "$n" "$mode" "$regs" "$spill" "$clk" \
      "$ninstr" "$(echo "$t1 - $t0" | bc)"
  done
done
