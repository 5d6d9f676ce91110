#!/usr/bin/env bash
# Where the fused kernel's probe overhead comes from: the same kernel built probes-off, default
# (MMA records streamed), MMA records staged in shared memory, and no MMA-side records; kernel time
# of every shape on the host and local paths (21 trials each, no dumps).
set -uo pipefail
OUT=${OUT:-/tmp/xstage-out}
W=/tmp/xstage-ovh
rm -rf "$W" && mkdir -p "$W"/{bin,off,on,smem,nomma}
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I instrument/include -Xptxas -v"
$NV instrument/examples/fused_moe.cu -o $W/bin/off > $W/ptxas_off.txt 2>&1 &
$NV -DXSTAGE_TRACE instrument/examples/fused_moe.cu -o $W/bin/on > $W/ptxas_on.txt 2>&1 &
$NV -DXSTAGE_TRACE -DFUSED_MMA_SMEM_PROBES instrument/examples/fused_moe.cu -o $W/bin/smem > $W/ptxas_smem.txt 2>&1 &
$NV -DXSTAGE_TRACE -DFUSED_NO_MMA_PROBES instrument/examples/fused_moe.cu -o $W/bin/nomma > $W/ptxas_nomma.txt 2>&1 &
wait
grep -h "fused_moe_kernel" -A2 $W/ptxas_*.txt | grep Used
for v in off on smem nomma off on; do  # off/on twice: the spread between identical runs
  for dest in host local; do
    $W/bin/$v --dest $dest --no-dumps --out $W/$v | grep -v "^check" | sed "s/^/$v /"
  done
done | tee $OUT/overhead_variants.txt
