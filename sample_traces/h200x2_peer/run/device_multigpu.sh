#!/usr/bin/env bash
# Multi-GPU runs (needs 2 GPUs with P2P): the NVLink peer store path calibrated in both directions,
# and the reference fused kernel with its remote buffer on the peer GPU, one process per GPU, both
# schedules, per-rank dumps and Nsight Systems reports. NVLink multicast stays off.
# From the repository root: bash sample_traces/h200x2_peer/run/device_multigpu.sh   (OUT set; .device-carry carried)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/xstage-out}
W=/tmp/xstage-mg
rm -rf "$W" && mkdir -p "$W"/{bin,cal_peer0to1,cal_peer1to0,fused,times,meta}
M=$W/meta
{
  echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total --format=csv,noheader | sed 's/^/gpu=/'
  nvcc --version | tail -1 | sed 's/^/nvcc=/'
  nvidia-smi | grep -o "CUDA Version: [0-9.]*" | sed 's/^/driver_/'
} > "$M/provenance.txt"
nvidia-smi topo -m > "$M/topology.txt" 2>&1
cat "$M/provenance.txt" "$M/topology.txt"
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/xstage_trace/instrument/include"
$NV -DXSTAGE_TRACE src/xstage_trace/instrument/bench/burst_gap.cu -o $W/bin/burst_gap_on &
$NV -DXSTAGE_TRACE src/xstage_trace/instrument/examples/fused_moe.cu -o $W/bin/fused_on &
$NV src/xstage_trace/instrument/examples/fused_moe.cu -o $W/bin/fused_off &
wait
ls $W/bin
timeout 120 $W/bin/burst_gap_on --dest peer --device 0 --peer 1 --out $W/cal_peer0to1 | tail -2
timeout 120 $W/bin/burst_gap_on --dest peer --device 1 --peer 0 --out $W/cal_peer1to0 | tail -2
# Both ranks at once, each storing its Linear-2 tiles into the other GPU.
timeout 200 $W/bin/fused_off --dest peer --device 0 --peer 1 --out $W/times > $M/fused_off_rank0.log 2>&1 &
timeout 200 $W/bin/fused_off --dest peer --device 1 --peer 0 --out $W/times > $M/fused_off_rank1.log 2>&1 &
wait
cat $M/fused_off_rank*.log
if [ -f .device-carry/nsys-env.sh ]; then
  source .device-carry/nsys-env.sh > /dev/null
  for r in 0 1; do
    p=$((1 - r))
    ( cd $W/fused && timeout 300 nsys profile -t cuda,nvtx -o fused_rank$r -f true \
        $W/bin/fused_on --dest peer --device $r --peer $p --trials 21 --out . > $M/fused_on_rank$r.log 2>&1 ) &
  done
  wait
  for r in 0 1; do nsys export --type sqlite -o $W/fused/fused_rank$r.sqlite $W/fused/fused_rank$r.nsys-rep > /dev/null 2>&1; done
  nsys --version >> "$M/provenance.txt" 2>&1
  cat $M/fused_on_rank*.log | grep -v "^check"
fi
ls -la $W/fused | head -30
tar -C $W -cf - meta cal_peer0to1 cal_peer1to0 fused times | xz -T32 -6 > $W/mg.tar.xz
ls -la $W/mg.tar.xz
split -b 15M -d $W/mg.tar.xz "$OUT/mg.tar.xz.part"
