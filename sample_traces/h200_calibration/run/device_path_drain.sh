#!/usr/bin/env bash
# Runs the path-drain calibration on a GPU machine and packs what comes back into $OUT (docs/calibration-physics.md).
# Used as: [XSTAGE_GIT_COMMIT=<hash>] bash sample_traces/h200_calibration/run/device_path_drain.sh  (from the repository root, OUT set).
# Steps: provenance; build path_drain and burst_gap (probes on); SASS of the new kernels; sustained stores and the copy
# engine (host, local); synchronized-burst ramps twice (host) and once (local); load-compute-store rounds (host, local);
# streamed rounds (a 4-stage mainloop of S load steps, host and local);
# the burst_gap tensor2d sweep twice on the host path and once on the local one (the same sweep re-run for Q's
# stability); then one tarball per part, each under 15 MB.
set -uo pipefail
OUT=${OUT:-/tmp/xstage-out}
W=/tmp/xstage-pd
rm -rf "$W" && mkdir -p "$W"/{bin,meta,ramp,load,stream,sweep_a,sweep_b,sweep_local}
M=$W/meta
{
  echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git_commit=${XSTAGE_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.max.sm,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader | sed 's/^/gpu=/'
  nvcc --version | tail -1 | sed 's/^/nvcc=/'
  nvidia-smi | grep -o "CUDA Version: [0-9.]*" | sed 's/^/driver_/'
} > "$M/provenance.txt"
cat "$M/provenance.txt"
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/xstage_trace/instrument/include -lineinfo -DXSTAGE_TRACE"
$NV src/xstage_trace/instrument/bench/path_drain.cu -o $W/bin/path_drain || exit 1
$NV src/xstage_trace/instrument/bench/burst_gap.cu -o $W/bin/burst_gap_on || exit 1
cuobjdump --dump-sass $W/bin/path_drain > "$M/path_drain_sass.txt" 2>&1
cuobjdump --dump-resource-usage $W/bin/path_drain > "$M/path_drain_resource.txt" 2>&1
grep -o "UTMASTG[.0-9A-Z]*\|UBLKCP[.0-9A-Z_]*\|SYNCS[.A-Z0-9_]*\|UTMACMDFLUSH" "$M/path_drain_sass.txt" | sort | uniq -c | tee "$M/path_drain_sass_summary.txt"
P="timeout 120 $W/bin/path_drain"
stream() {
  for d in host local; do $P --dest $d --stream --out $W/stream | tee -a "$M/stream.log"; done
  cp $W/stream/*.csv $M/ 2>/dev/null
}
if [ "${PD_ONLY:-}" = stream ]; then  # only the streamed rounds (a second call after the rest)
  stream
  tar -C $W -cf - meta stream | xz -T16 -6 > "$OUT/path_drain_stream.tar.xz"
  ls -la "$OUT"
  exit 0
fi
for d in host local; do $P --dest $d --rates --out $M | tee -a "$M/rates.log"; done
$P --dest host --ramp --rep 1 --out $W/ramp | tee -a "$M/ramp.log" | tail -3
$P --dest host --ramp --rep 2 --out $W/ramp | tee -a "$M/ramp.log" | tail -3
$P --dest local --ramp --rep 1 --out $W/ramp | tee -a "$M/ramp.log" | tail -3
for d in host local; do $P --dest $d --load --out $W/load | tee -a "$M/load.log"; done
cp $W/load/*.csv $M/ 2>/dev/null
stream
$P --dest host --rates --out $M | sed 's/^/again /' | tee -a "$M/rates.log"
for s in a b; do
  t0=$(date +%s.%N)
  timeout 150 $W/bin/burst_gap_on --dest host --store tensor2d --out $W/sweep_$s | tee "$M/sweep_$s.log" | tail -1
  echo "sweep_${s}_seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') finished=$(date -u +%H:%M:%S)" | tee -a "$M/provenance.txt"
done
timeout 60 $W/bin/burst_gap_on --dest local --store tensor2d --out $W/sweep_local | tee "$M/sweep_local.log" | tail -1
grep -h tensor2d_check "$M"/sweep_*.log | tee -a "$M/provenance.txt"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader | sed 's/^/gpu_end=/' | tee -a "$M/provenance.txt"
for d in ramp load sweep_a sweep_b sweep_local; do echo "$d $(ls $W/$d | wc -l) files"; done
du -sh $W/*
tar -C $W -cf - meta ramp load stream | xz -T16 -6 > "$OUT/path_drain.tar.xz"
for s in sweep_a sweep_b sweep_local; do tar -C $W -cf - $s | xz -T16 -6 > "$OUT/$s.tar.xz"; done
ls -la "$OUT"
