#!/usr/bin/env bash
# Build the FA3 driver (CPU machine, nvcc 13.0): FA3's bf16 / head-dim-128 forward instantiation
# compiled twice from a tree patched by `xstage-trace instrument apply --target fa3` -- probes on
# (-DXSTAGE_TRACE=1) and probes compiled out -- and linked with driver.cu into one binary, so that
# trials of both builds interleave in one process. The probes-off object has FA3's namespace and
# its two global launch templates renamed by the preprocessor (flash -> flash_plain,
# run_mha_fwd_ -> run_mha_fwd_plain_, run_flash_fwd -> run_flash_fwd_plain): the two builds are
# otherwise the same code with the same symbol names.
#   usage: [XSTAGE_FA3_FLAGS=...] build.sh PATCHED_FLASH_ATTENTION_ROOT OUT_DIR   (objects are reused if present)
# XSTAGE_FA3_FLAGS: the recipe's compile-time switches for the traced object and the driver (which reads the
# records' layout from the same header), e.g. -DXSTAGE_FA3_KV_STEPS=1 for the K/V-step events.
# Flags as hopper/setup.py with the reduced feature set (see src/xstage_trace/instrument/targets/fa3/compile.sh).
set -euo pipefail
root=$(realpath "$1"); out=$(realpath -m "$2"); here=$(dirname "$(realpath "$0")")
inc=$(realpath "$here/../../../src/xstage_trace/instrument/include")
mkdir -p "$out"
grep -q "xstage-recipe fa3" "$root/hopper/flash_fwd_kernel_sm90.h" || { echo "build.sh: $root is not patched (run: xstage-trace instrument apply --target fa3 --src $root)" >&2; exit 2; }
. "$here/../../../src/xstage_trace/instrument/targets/fa3/nvcc_flags.sh"
common="$fa3_head -lineinfo $fa3_tail"
tu=$root/hopper/instantiations/flash_fwd_hdim128_bf16_sm90.cu
plain="-Dflash=flash_plain -Drun_mha_fwd_=run_mha_fwd_plain_ -Drun_flash_fwd=run_flash_fwd_plain"
build_obj() {  # name, extra flags
  local name=$1; shift
  [ -s "$out/$name.o" ] && return 0
  local t0; t0=$(date +%s)
  nvcc $common --resource-usage "$@" -c "$tu" -o "$out/$name.o.tmp" > "$out/$name.log" 2>&1 \
    || { echo "build.sh: compiling $name failed (log: $out/$name.log)" >&2; tail -20 "$out/$name.log" >&2; return 1; }
  mv "$out/$name.o.tmp" "$out/$name.o"
  echo "$name: $(( $(date +%s) - t0 )) s"
}
extra=${XSTAGE_FA3_FLAGS:-}
build_obj fa3_trace -DXSTAGE_TRACE=1 $extra & p1=$!
build_obj fa3_plain $plain & p2=$!
wait $p1 && wait $p2
nvcc $common -I"$inc" $extra -c "$here/driver.cu" -o "$out/driver.o"
nvcc -gencode arch=compute_90a,code=sm_90a "$out/driver.o" "$out/fa3_trace.o" "$out/fa3_plain.o" -o "$out/fa3_driver"
echo "built $out/fa3_driver"
