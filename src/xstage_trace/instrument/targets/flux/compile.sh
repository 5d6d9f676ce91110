#!/usr/bin/env bash
# Instantiate and compile one FLUX kernel per recipe site as FLUX's CMake build would: its generator
# (src/generator/gen_gemm_rs.cc, gen_moe_gather_rs.cc, built with g++) writes the op-registry
# translation units, pick.awk cuts one to one configuration, nvcc compiles it with the flags of
# FLUX's CMakeLists.txt to a cubin: sm80 GEMM-RS bf16 with the scatter epilogue (VisitorAuxStoreScatter,
# intra-node; -rdc=true as src/gemm_rs builds) and sm90 MoE GatherRS (the threadblock-specialized
# grouped GEMM with its comm CTAs). Each in three modes: upstream (recipe reverted), probes off
# (recipe applied, no macro), probes on (-DXSTAGE_TRACE=1, as `instrument flags --target flux`
# prints); prints a markdown table of registers, spills, stack, shared memory, clock reads and SASS
# instructions per kernel (usage.awk).
#   usage: compile.sh FLUX_ROOT CUTLASS_ROOT [XSTAGE_TRACE_CLI]
# FLUX_ROOT: a FLUX checkout (recipe verified at 19831ca2); CUTLASS_ROOT: the cutlass FLUX pins in
# 3rdparty/cutlass (df8a550d, v3.8.0-12), with include/ and tools/util/include/.
# Needs g++ (C++17), nvcc 13.0 and cuobjdump on PATH; no GPU, no NVSHMEM (FLUX_SHM_USE_NVSHMEM stays
# undefined: these two kernels do not use it). Leaves the recipe applied. 4-6 min on 2 cores, 2.3 GB peak.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: compile.sh FLUX_ROOT CUTLASS_ROOT [XSTAGE_TRACE_CLI]" >&2; exit 2; }
here=$(dirname "$(realpath "$0")")
root=$(realpath "$1"); cutlass=$(realpath "$2"); cli=${3:-xstage-trace}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cuda=$(nvcc --dryrun -x cu /dev/null 2>&1 | awk '/^#\$ TOP=/ && top == "" { top = substr($0, 8) } END { print top }')

# FLUX's generators, run for the two architectures (A100: 108 SMs, H800 / H200: 132)
geninc="-I$cuda/include -I$cuda/include/cccl -I$root/include -I$cutlass/include -I$cutlass/tools/util/include"
for g in gemm_rs moe_gather_rs; do
  g++ -std=c++17 -w $geninc "$root/src/generator/gen_$g.cc" -o "$work/gen_$g"
done
mkdir "$work/gen80" "$work/gen90"
"$work/gen_gemm_rs" --dir="$work/gen80" --archs=80 --sm_cores=108 --output_file="$work/gen80.txt" >/dev/null
"$work/gen_moe_gather_rs" --dir="$work/gen90" --archs=90 --sm_cores=132 --output_file="$work/gen90.txt" >/dev/null

# name | arch | extra flags | generated file | hparams (the tuning table's choice for A100 tp8 bf16
# intra-node; the first GatherRS shape, topk 8, 28 comm CTAs, N 1280)
kernels=(
  "sm80_gemm_rs_scatter|sm_80|-rdc=true|gen80/flux_bf16_bf16_void_bf16_fp32_fp32_sm80_a100_reducescatter_rcr_gemmv2_false_false_intranode.cu|64x64x32_16x8x16_streamksk_nil_128x128x32_gemmstreamk_3_rasterheuristic"
  "sm90_moe_gather_rs|sm_90a||gen90/flux_bf16_bf16_bf16_bf16_fp32_fp32_sm90_h800_gatherrs_rcr_gemmgroupedv3_false_false_8.cu|1x1x1_cooperative_blockscalemperrow_blockscalenperblock_28_1280_128x256x64_gemmdefault_0_rasterheuristic"
)
for k in "${kernels[@]}"; do
  IFS='|' read -r name arch extra file hp <<< "$k"
  awk -v hp="$hp" -f "$here/pick.awk" "$work/$file" > "$work/$name.cu"
  [ -s "$work/$name.cu" ] || { echo "flux.sh: $file has no hparams $hp (generator changed?)" >&2; exit 1; }
  # the kernel's SharedStorage (what the op passes as dynamic shared memory) as a symbol's size
  printf '__device__ char xstage_check_shared_storage_bytes[sizeof(%s_%s::SharedStorage)];\n' \
    "$(basename "$file" .cu)" "$hp" >> "$work/$name.cu"
done

# src/CMakeLists.txt and CMakeLists.txt: CMAKE_CUDA_FLAGS and include directories
flags="-DNDEBUG -Xcompiler -Wno-psabi -Xcompiler=-fno-strict-aliasing -DCUTLASS_DEBUG_TRACE_LEVEL=0 --expt-extended-lambda --expt-relaxed-constexpr --std=c++17 -Xcompiler -O3 -I$root/include -I$root/src -I$cutlass/include -I$cutlass/tools/util/include -Xptxas -v -cubin"
declare -A row
for mode in upstream off on; do
  if [ $mode = upstream ]; then
    "$cli" instrument apply --target flux --src "$root" --revert >/dev/null 2>&1 || true
  else
    "$cli" instrument apply --target flux --src "$root" >/dev/null
  fi
  define=""; [ $mode = on ] && define="-DXSTAGE_TRACE=1"
  for k in "${kernels[@]}"; do
    IFS='|' read -r name arch extra file hp <<< "$k"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    nvcc $flags $extra $define -arch="$arch" "$work/$name.cu" -o "$work/$name.$mode.cubin" > "$work/$name.$mode.log" 2>&1 \
      || { tail -30 "$work/$name.$mode.log"; exit 1; }
    cuobjdump -sass "$work/$name.$mode.cubin" > "$work/$name.$mode.sass"
    cuobjdump -res-usage "$work/$name.$mode.cubin" > "$work/$name.$mode.res"
    usage=$(awk -f "$here/usage.awk" "$work/$name.$mode.log" "$work/$name.$mode.res" "$work/$name.$mode.sass") \
      || { echo "flux.sh: no single flux_ kernel in $name ($mode)" >&2; exit 1; }
    storage=$(cuobjdump -elf "$work/$name.$mode.cubin" | awk '$NF == "xstage_check_shared_storage_bytes" { size = $3 } END { print size }')
    [ -n "$storage" ] || { echo "flux.sh: no SharedStorage symbol in $name ($mode)" >&2; exit 1; }
    # the kernel's instructions without addresses and encodings, and how many differ from upstream's
    awk '/Function : / { k = ($3 ~ /flux_/) } k && /^ +\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]+\*\// { sub(/^ +\/\*[0-9a-f]+\*\/ +/, ""); sub(/ *\/\*.*/, ""); print }' \
      "$work/$name.$mode.sass" > "$work/$name.$mode.text"
    # and the same with register names, branch targets and immediates replaced (what ptxas re-ordered)
    sed -E 's/\bU?[RP][0-9]+\b/R/g; s/\.reuse//g; s/0x[0-9a-f]+/X/g' "$work/$name.$mode.text" > "$work/$name.$mode.shape"
    changed=$(diff "$work/$name.upstream.text" "$work/$name.$mode.text" | grep -c '^>' || true)
    moved=$(diff "$work/$name.upstream.shape" "$work/$name.$mode.shape" | grep -c '^>' || true)
    row[$name.$mode]="$usage $((storage)) $changed $moved"
    echo "$name $mode: ${row[$name.$mode]} ($(( $(date +%s) - t0 )) s)" >&2
  done
done

# fields: 0 registers 1 stack 2 spill_st 3 spill_ld 4 static_smem 5 param_bank 6 instructions 7 clock
# 8 globaltimer 9 shared_storage 10 instructions not in upstream's SASS (diff lines) 11 the same up to
# register names, branch targets and immediates
echo "| kernel | registers | spills (st / ld bytes) | stack bytes | shared memory: static + SharedStorage | constant bank 0 (parameters) | clock + globaltimer reads | SASS instructions | not in upstream's SASS: as is, up to registers and addresses |"
echo "|---|---|---|---|---|---|---|---|---|"
for k in "${kernels[@]}"; do
  IFS='|' read -r name arch extra file hp <<< "$k"
  read -r -a u <<< "${row[$name.upstream]}"; read -r -a f <<< "${row[$name.off]}"; read -r -a n <<< "${row[$name.on]}"
  echo "| $name ($arch, $hp): upstream / off / on | ${u[0]} / ${f[0]} / ${n[0]} | ${u[2]}/${u[3]}, ${f[2]}/${f[3]}, ${n[2]}/${n[3]} | ${u[1]} / ${f[1]} / ${n[1]} | ${u[4]} + ${u[9]} / ${f[4]} + ${f[9]} / ${n[4]} + ${n[9]} | ${u[5]} / ${f[5]} / ${n[5]} | ${u[7]}+${u[8]} / ${f[7]}+${f[8]} / ${n[7]}+${n[8]} | ${u[6]} / ${f[6]} / ${n[6]} | – / ${f[10]}, ${f[11]} / ${n[10]}, ${n[11]} |"
done
