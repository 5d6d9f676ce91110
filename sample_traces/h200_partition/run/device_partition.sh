#!/usr/bin/env bash
# The H200 partition sweep of gather_rs_moe.cu (docs/model.md §9, issue 26), in one device call.
# From the repository root: OUT=... bash sample_traces/h200_partition/run/device_partition.sh
#  1) builds the kernel with and without -DXSTAGE_TRACE (ptxas report kept);
#  2) calibration (traced, its own workloads, not in the sweep): one workload per shape at M = 6144, uniform
#     routing, seed 77, C = 1..32, 3 interleaved trials, one probed launch per C (probes_calib_*.csv);
#  3) the sweep (untraced): 45 workloads = 3 shapes x M in {2048,4096,8192,16384,32768} x skew in {0, 0.6, 1.2},
#     seed 1000 + index, C = 1..16 (C = 1..32 for granite M=32768 uniform), 20 interleaved trials after 2 warm-up
#     rounds, host-mapped destination, then the same on local HBM (the control);
#     then the traced build over the same workloads: one probed launch per C (probes_sweep_*.csv);
#  4) probe overhead: ROUNDS rounds of untraced / traced / untraced again over three workloads (one per shape),
#     C = 1..16, 10 trials each, order rotated (ROUNDS x 10 trials per build and point);
#  5) the launcher's selector (partition_select.hpp) alone on this machine's CPU: partition_select_bench over
#     run/select_bench_input.txt (the 45 sweep problems with calibrated service tables), 200000 calls each.
# Every run checks its output (fp64 reference on sampled tokens, poison words, the same checksum at every C).
set -uo pipefail
OUT=${OUT:-/tmp/xstage-out}
STEPS=${STEPS:-"calib sweep probes overhead select"}
ROUNDS=${ROUNDS:-3}
DUMPS=${DUMPS:-21}  # workload index whose probed launches are also written as dumps (qwen M=8192 uniform)
TRIALS=${TRIALS:-20}
W=/tmp/xstage-partition
rm -rf "$W" && mkdir -p "$W"/{bin,res,meta} "$OUT"
INC=src/xstage_trace/instrument/include
SRC=src/xstage_trace/instrument/examples/gather_rs_moe.cu
{
  echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.max.sm,memory.total --format=csv,noheader | sed 's/^/gpu=/'
  nvcc --version | tail -1 | sed 's/^/nvcc=/'
  nvidia-smi | grep -o "CUDA Version: [0-9.]*" | sed 's/^/driver_/'
  echo "git_commit=${XSTAGE_GIT_COMMIT:-unknown}"
  echo "steps=$STEPS trials=$TRIALS rounds=$ROUNDS"
  lscpu | grep -m1 "Model name" | sed 's/^Model name: */cpu=/'
  g++ --version | head -1 | sed 's/^/gxx=/'
} > "$W/meta/provenance.txt"
cat "$W/meta/provenance.txt"
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I $INC -Xptxas -v"
$NV $SRC -o $W/bin/off > $W/meta/ptxas_off.txt 2>&1 &
$NV -cubin $SRC -o $W/bin/off.cubin > /dev/null 2>&1 &
$NV -cubin -DXSTAGE_TRACE $SRC -o $W/bin/on.cubin > /dev/null 2>&1 &
$NV -DXSTAGE_TRACE $SRC -o $W/bin/on > $W/meta/ptxas_on.txt 2>&1 &
wait
grep -h "Used" $W/meta/ptxas_*.txt
[ -x $W/bin/off ] && [ -x $W/bin/on ] || { cat $W/meta/ptxas_*.txt; exit 1; }
wl=""; i=0
for sh in granite qwen deepseek; do for m in 2048 4096 8192 16384 32768; do for sk in 0 0.6 1.2; do
  c=16; [ $sh = granite ] && [ $m = 32768 ] && [ $sk = 0 ] && c=32
  wl="$wl,$sh:$m:$sk:$((1000 + i)):$c"; i=$((i + 1))
done; done; done
wl=${wl#,}
echo "$wl" | tr , '\n' > $W/meta/workloads.txt
t0=$(date +%s)
calib="granite:6144:0:77:32,qwen:6144:0:77:32,deepseek:6144:0:77:32"
BUDGET_S=${BUDGET_S:-500}  # no new step starts after this many seconds (the call's limit is 600)
run() { local name=$1 lim=$2; shift 2; echo "== $name"
  if [ $(( $(date +%s) - t0 )) -gt $BUDGET_S ]; then echo "skipped (budget) $name" | tee -a $W/meta/rc.txt; return; fi
  timeout $lim "$@" 2>&1 | tee -a $W/meta/$name.log | grep -v "^$" | tail -60; echo "rc=${PIPESTATUS[0]} $name" | tee -a $W/meta/rc.txt; }
for s in $STEPS; do case $s in
  calib) for d in host local; do run calib_$d 60 $W/bin/on --dest $d --workloads $calib --trials 3 --warmup 1 --summary --tag calib --out $W/res; done ;;
  sweep) for d in host local; do run sweep_$d 220 $W/bin/off --dest $d --workloads $wl --trials $TRIALS --warmup 2 --tag sweep --out $W/res; done ;;
  probes) for d in host local; do run probes_$d 90 $W/bin/on --dest $d --workloads $wl --trials 0 --warmup 1 --summary --tag probes ${DUMPS:+--dump-workloads $DUMPS} --out $W/res; done ;;
  overhead)
    ov="qwen:8192:0:2000:16,granite:16384:0.6:2001:16,deepseek:32768:1.2:2002:16"
    for r in $(seq 1 $ROUNDS); do
      set -- off on off_b; for k in 0 1 2; do idx=$(( (k + r) % 3 + 1 )); v=${!idx}; b=$v; [ $v = off_b ] && b=off
        run ovh_${v}_r$r 40 $W/bin/$b --dest host --workloads $ov --trials 10 --warmup 1 --tag ovh_${v}_r$r --out $W/res
      done
    done ;;
  select)
    g++ -O2 -std=c++17 -I src/xstage_trace/instrument/examples src/xstage_trace/instrument/examples/partition_select_bench.cpp -o $W/bin/psb &&
      run select_bench 60 bash -c "$W/bin/psb < sample_traces/h200_partition/run/select_bench_input.txt > $W/res/select_bench_host.txt"
    awk '{print $2}' $W/res/select_bench_host.txt | sort -n | awk '{a[NR]=$1} END{print "select_bench ns/call: median", a[int((NR+1)/2)], "max", a[NR], "n", NR}' ;;
esac; echo "elapsed $(( $(date +%s) - t0 )) s after $s"; done
ls $W/res | head -50
cp $W/bin/*.cubin $W/meta/ 2>/dev/null
tar -C $W -cf - meta res | xz -T16 -6 > $OUT/partition_results.tar.xz
ls -la $OUT
