#!/usr/bin/env bash
# Runs the reference fused kernel on a GPU machine and packs the results into $OUT.
# From the repository root: bash sample_traces/h200_fused_moe/run/device_fused.sh
# 1) kernel times, probes compiled in and out (21 trials each, host and local destinations);
#    st.global-epilogue variants of S1 (traced, separate folder);
# 2) one traced run of every shape x schedule under Nsight Systems (dumps + .nsys-rep + .sqlite).
set -uo pipefail
OUT=${OUT:-/tmp/xstage-out}
W=/tmp/xstage-fused
rm -rf "$W" && mkdir -p "$W"/{bin,times,traced,variants,meta}
M=$W/meta
{
  echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.max.sm,memory.total --format=csv,noheader | sed 's/^/gpu=/'
  nvcc --version | tail -1 | sed 's/^/nvcc=/'
  nvidia-smi | grep -o "CUDA Version: [0-9.]*" | sed 's/^/driver_/'
} > "$M/provenance.txt"
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/xstage_trace/instrument/include -lineinfo"
$NV -DXSTAGE_TRACE -Xptxas -v src/xstage_trace/instrument/examples/fused_moe.cu -o $W/bin/fused_on > "$M/ptxas_on.txt" 2>&1 || { cat "$M/ptxas_on.txt"; exit 1; }
$NV -Xptxas -v src/xstage_trace/instrument/examples/fused_moe.cu -o $W/bin/fused_off > "$M/ptxas_off.txt" 2>&1 || exit 1
for dest in host local; do
  timeout 200 $W/bin/fused_off --dest $dest --shape all --out $W/times || echo "fused_off $dest failed rc=$?"
  timeout 200 $W/bin/fused_on --dest $dest --shape all --out $W/times --no-dumps || echo "fused_on $dest failed rc=$?"
done
# Variants of S1 on the host path (traced, separate folder): the epilogue storing with st.global
# from the epilogue warps (stg) instead of the bulk copy engine, with shared-memory or streamed
# global operands, and with both roles sharing SM sub-partitions: the coupling through the SM's
# memory-instruction pipeline.
for v in "--epilogue stg" "--epilogue stg --operands global" "--epilogue stg --layout shared"; do
  timeout 200 $W/bin/fused_on --dest host --shape S1 --trials 5 --out $W/variants $v || echo "variant $v failed"
done
if [ -f .device-carry/nsys-env.sh ]; then
  source .device-carry/nsys-env.sh > /dev/null
  ( cd $W/traced && timeout 300 nsys profile -t cuda,nvtx --gpu-metrics-devices=0 --gpu-metrics-frequency=10000 -o fused_reference -f true \
      bash -c "$W/bin/fused_on --dest host --shape all --trials 5 --out . && $W/bin/fused_on --dest local --shape S1 --trials 5 --out ." ) > "$M/nsys.log" 2>&1
  nsys export --type sqlite -o $W/traced/fused_reference.sqlite $W/traced/fused_reference.nsys-rep >> "$M/nsys.log" 2>&1
  nsys --version >> "$M/provenance.txt" 2>&1
  grep -v "Processing" "$M/nsys.log" | tail -12
fi
ls -la $W/traced $W/times
tar -C $W -cf - meta times traced variants | xz -T16 -6 > $W/fused.tar.xz
ls -la $W/fused.tar.xz
split -b 15M -d $W/fused.tar.xz "$OUT/fused.tar.xz.part"
