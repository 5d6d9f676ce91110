#!/usr/bin/env bash
# Compile FA3's bf16 / head-dim-128 forward translation unit (2 kernels: non-causal and causal) for
# sm_90a as hopper/setup.py would with the reduced feature set, in a flash-attention tree patched
# by `xstage-trace instrument apply --target fa3`: probes on (NVCC_APPEND_FLAGS=-DXSTAGE_TRACE=1,
# as `instrument flags --target fa3` prints), probes off, then upstream (reverted).
#   usage: compile.sh FLASH_ATTENTION_ROOT [XSTAGE_TRACE_CLI]
# Needs nvcc 13.0, cuobjdump + nvdisasm on PATH, ROOT/csrc/cutlass/include. ~4 min and ~5 GB per compile.
set -euo pipefail
root=$(realpath "$1"); cli=${2:-xstage-trace}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
. "$(dirname "$(realpath "$0")")/nvcc_flags.sh"
flags="$fa3_head --resource-usage $fa3_tail -cubin"
tu=$root/hopper/instantiations/flash_fwd_hdim128_bf16_sm90.cu
for mode in trace no-trace upstream; do
  append=""
  if [ $mode = upstream ]; then
    "$cli" instrument apply --target fa3 --src "$root" --revert >/dev/null 2>&1 || true
  else
    "$cli" instrument apply --target fa3 --src "$root" >/dev/null
    [ $mode = trace ] && append="-DXSTAGE_TRACE=1"
  fi
  t0=$(date +%s.%N)
  NVCC_APPEND_FLAGS="$append" nvcc $flags "$tu" -o "$work/$mode.cubin" > "$work/$mode.log" 2>&1 || { tail -30 "$work/$mode.log"; exit 1; }
  t1=$(date +%s.%N)
  cuobjdump -sass "$work/$mode.cubin" > "$work/$mode.sass"
  printf '%-9s %.0f s\n' "$mode" "$(echo "$t1 - $t0" | bc)"
  # per kernel: registers / spills (ptxas resource usage), clock reads and instructions in the SASS
  grep -E "Function properties|spill|Used [0-9]+ registers" "$work/$mode.log" | sed 's/^ptxas info *: //' || true
  awk '/Function :/{name=$3} /SR_CLOCK/{c[name]++} /^ +\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]+\*\//{n[name]++} END{for (k in n) { s = (k ~ /StaticPersistent/) ? "non-causal (StaticPersistent)" : ((k ~ /DynamicPersistent/) ? "causal (DynamicPersistent)" : k); printf "  %s: %d SASS instructions, %d clock reads\n", s, n[k], c[k] } }' "$work/$mode.sass"
done
