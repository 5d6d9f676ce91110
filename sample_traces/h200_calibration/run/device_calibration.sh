#!/usr/bin/env bash
# Runs the calibration benchmark on a GPU machine and packs what comes back into $OUT.
# Used as: [XSTAGE_GIT_COMMIT=<hash>] bash sample_traces/h200_calibration/run/device_calibration.sh  (from the repository
# root, OUT set; XSTAGE_GIT_COMMIT names the sources' commit where the copy's git metadata is stale).
# Steps: provenance, build (probes on/off), probe cost, overhead, full sweeps (host, local) with st.global
# stores, with bulk copies (--store bulk) and with 2-D tensor stores (--store tensor2d; a host control
# sweep with a 128-column output, --tensor-cols 128),
# a quick sweep under Nsight Systems (needs .device-carry from shared/tools/device-nsys-prep.sh),
# a real overflow case, SASS of the probe, then one tarball split into <=15 MB parts.
set -uo pipefail
OUT=${OUT:-/tmp/xstage-out}
W=/tmp/xstage-cal
rm -rf "$W" && mkdir -p "$W"/{bin,host,local,host_bulk,local_bulk,host_tensor2d,local_tensor2d,host_tensor2d_c128,quick,overflow,meta}
M=$W/meta
{
  echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git_commit=${XSTAGE_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  echo "host=$(hostname)"
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader | sed 's/^/gpu=/'
  nvcc --version | tail -1 | sed 's/^/nvcc=/'
  nvidia-smi | grep -o "CUDA Version: [0-9.]*" | sed 's/^/driver_/'
} > "$M/provenance.txt"
cat "$M/provenance.txt"
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/xstage_trace/instrument/include -lineinfo"
$NV -DXSTAGE_TRACE src/xstage_trace/instrument/bench/burst_gap.cu -o $W/bin/burst_gap_on || exit 1
$NV src/xstage_trace/instrument/bench/burst_gap.cu -o $W/bin/burst_gap_off || exit 1
cuobjdump --dump-sass --function _Z17probe_cost_kernelN6xstage12DeviceBufferEiPy $W/bin/burst_gap_on > "$M/probe_cost_sass_on.txt" 2>&1
cuobjdump --dump-sass --function _Z17probe_cost_kernelN6xstage12DeviceBufferEiPy $W/bin/burst_gap_off > "$M/probe_cost_sass_off.txt" 2>&1
cuobjdump --dump-sass --function _Z12burst_kernelP5uint4jimjN6xstage12DeviceBufferE $W/bin/burst_gap_on > "$M/burst_kernel_sass_on.txt" 2>&1
cuobjdump --dump-sass --function _Z17burst_bulk_kernelPcimjN6xstage12DeviceBufferE $W/bin/burst_gap_on > "$M/burst_bulk_kernel_sass_on.txt" 2>&1
cuobjdump --dump-sass --function _Z21burst_tensor2d_kernel14CUtensorMap_stS_jjjimjN6xstage12DeviceBufferE $W/bin/burst_gap_on > "$M/burst_tensor2d_kernel_sass_on.txt" 2>&1
cuobjdump --dump-resource-usage $W/bin/burst_gap_on > "$M/resource_on.txt" 2>&1
cuobjdump --dump-resource-usage $W/bin/burst_gap_off > "$M/resource_off.txt" 2>&1
$W/bin/burst_gap_on --probe-cost | tee "$M/probe_cost.txt"
$W/bin/burst_gap_off --probe-cost | tee -a "$M/probe_cost.txt"
$W/bin/burst_gap_on --overhead --out "$M" | tail -3
$W/bin/burst_gap_off --overhead --out "$M" | tail -3
for store in stg bulk tensor2d; do
  sfx=$([ $store = stg ] || echo _$store)
  t0=$(date +%s.%N)
  timeout 150 $W/bin/burst_gap_on --dest host --store $store --out $W/host$sfx | tee "$M/sweep_host_$store.log" | tail -2
  timeout 60 $W/bin/burst_gap_on --dest local --store $store --out $W/local$sfx | tee "$M/sweep_local_$store.log" | tail -2
  grep -h tensor2d_check "$M"/sweep_*_$store.log | tee -a "$M/provenance.txt"
  echo "sweep_seconds_$store=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')" | tee -a "$M/provenance.txt"
done
# control: the same 2-D tensor stores into a 128-column output (every tile contiguous, as the bulk sweep's)
timeout 150 $W/bin/burst_gap_on --dest host --store tensor2d --tensor-cols 128 --out $W/host_tensor2d_c128 | tee "$M/sweep_host_tensor2d_c128.log" | tail -2
grep -h tensor2d_check "$M/sweep_host_tensor2d_c128.log" | tee -a "$M/provenance.txt"
$W/bin/burst_gap_on --dest host --quick --capacity 40 --out $W/overflow | tail -1
if [ -f .device-carry/nsys-env.sh ]; then
  source .device-carry/nsys-env.sh
  ( cd $W/quick && nsys profile -t cuda,nvtx --gpu-metrics-devices=0 --gpu-metrics-frequency=2000 \
      -o quick_sweep -f true bash -c "$W/bin/burst_gap_on --dest host --quick --out . && $W/bin/burst_gap_on --dest local --quick --out ." ) > "$M/nsys.log" 2>&1
  nsys export --type sqlite -o $W/quick/quick_sweep.sqlite $W/quick/quick_sweep.nsys-rep >> "$M/nsys.log" 2>&1
  nsys --version >> "$M/provenance.txt" 2>&1
  tail -3 "$M/nsys.log"
fi
for d in host local host_bulk local_bulk host_tensor2d local_tensor2d host_tensor2d_c128; do echo "$d $(ls $W/$d | wc -l)"; done; ls -la $W/quick | tail -5
du -sh $W/*
tar -C $W -cf - meta host local host_bulk local_bulk host_tensor2d local_tensor2d host_tensor2d_c128 quick overflow | xz -T16 -6 > $W/cal.tar.xz
ls -la $W/cal.tar.xz
split -b 15M -d $W/cal.tar.xz "$OUT/cal.tar.xz.part"
ls -la "$OUT"
