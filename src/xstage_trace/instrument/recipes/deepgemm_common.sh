# Shared by targets/deepgemm_sm90/compile.sh and targets/deepgemm_megamoe/compile.sh (sourced, not run): compile DeepGEMM kernel
# instantiations as its JIT would (one instantiation per TU, the JIT's nvcc flags) in a tree patched by
# `xstage-trace instrument apply`, upstream (reverted), probes on and probes off, and print ptxas
# registers / spills, clock reads and SASS instructions per kernel.
# Needs nvcc, cuobjdump + nvdisasm on PATH and ROOT/third-party/cutlass/include.

# dg_setup ROOT [XSTAGE_TRACE_CLI]: sets root, cli and a work folder removed on exit.
dg_setup() {
  root=$(realpath "$1"); cli=${2:-xstage-trace}
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
}

# dg_instantiate NAME HEADER KERNEL_EXPRESSION: one TU taking the address of one kernel instantiation.
dg_instantiate() {
  printf '#include <deep_gemm/impls/%s.cuh>\nusing namespace deep_gemm;\nstatic void __instantiate_kernel() {\n    auto ptr = reinterpret_cast<void*>(&%s);\n}\n' "$2" "$3" > "$work/$1.cu"
}

# dg_compile_modes TARGET ARCH NAME_WIDTH: every TU of $work in the three modes (leaves the probes off).
dg_compile_modes() {
  local target=$1 arch=$2 width=$3 mode tu n t0 t1 regs spill clk ninstr
  local flags="-std=c++20 --diag-suppress=39,161,174,177,186,940 --ptxas-options=--register-usage-level=10,--verbose,--warn-on-local-memory-usage -I$root/deep_gemm/include -I$root/third-party/cutlass/include --gpu-architecture=$arch --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi -O3 --expt-relaxed-constexpr --expt-extended-lambda -cubin"
  for mode in upstream trace no-trace; do
    if [ $mode = upstream ]; then
      "$cli" instrument apply --target "$target" --src "$root" --revert >/dev/null 2>&1 || true
    else
      "$cli" instrument apply --target "$target" --src "$root" --$mode >/dev/null
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
      printf "%-${width}s %-9s %s, %s, %s clock reads, %s SASS instructions, %.1f s\n" "$n" "$mode" "$regs" "$spill" "$clk" \
        "$ninstr" "$(echo "$t1 - $t0" | bc)"
    done
  done
}
