#!/usr/bin/env bash
# One FA4 device call (the second of two): reassemble and install
# the CuTe DSL into /tmp/site, compile the three builds (compile_check.py, SASS through cuobjdump), then
# bench.py (check against SDPA, interleaved CUDA-event trials, per-tile rows), with the SM clock sampled
# by nvidia-smi meanwhile. Results: $OUT/results.tar.gz (res/) and $OUT/log.txt.
#   usage (repository root on the device): bash .carry/fa4b/run.sh [TRIALS]
# The device lays the repository anew for each call (ignored files of an earlier call are gone), so the
# first call, carrying .carry/fa4a, copies its part out of the tree: `mkdir -p /tmp/fa4stage && cp
# .carry/fa4a/* /tmp/fa4stage/`; this call, carrying .carry/fa4b, must follow while the machine is warm.
set -uo pipefail
trials=${1:-100}
A=/tmp/fa4stage; B=.carry/fa4b
W=/tmp/fa4run; R=$W/res; site=/tmp/site; rm -rf "$W"; mkdir -p "$R"
trap 'tar -czf "$OUT/results.tar.gz" -C "$W" res' EXIT
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
[ -s "$A/cu13.tar.xz.part1" ] || { ts "no $A/cu13.tar.xz.part1: the machine went cold after the staging call (or it was not made); stage again"; exit 3; }
[ "$(cat "$A/cu13.tar.xz.part1" "$B/cu13.tar.xz.part2" | sha256sum | cut -d' ' -f1)" = "$(cat "$B/cu13.tar.xz.sha256")" ] \
  || { ts "cu13.tar.xz parts do not match their sha256 (parts of two different stagings?)"; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$B"/whl/*.whl || exit 4
cat "$A/cu13.tar.xz.part1" "$B/cu13.tar.xz.part2" | xz -d | tar -x -C "$site" || exit 4
export PYTHONPATH=$site:$site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=0
mkdir -p "$W/trees" && tar -xzf "$B/trees.tar.gz" -C "$W/trees" && cp "$W/trees/"*.txt "$W/trees/patched/.xstage-recipe/fa4.diff" "$R/"
{ nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.max.sm,clocks.max.mem,power.limit,clocks.sm --format=csv
  nvidia-smi | head -4 | tail -2; uname -r; date -u +%FT%TZ; python3 --version
  python3 -m pip list 2>/dev/null | grep -iE "^(torch|cuda-|cupy|nvidia-cutlass|quack|apache-tvm|torch-c-dlpack|einops|numpy) "
  PYTHONPATH=$site python3 -m pip list --path "$site" 2>/dev/null | tail -n +3; } > "$R/device.txt" 2>&1
ts "$(sed -n 2p "$R/device.txt")"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,nounits -lms 100 > "$R/smi.csv" 2>&1 &
smi=$!
ts "compile check"
CUTE_DSL_ARCH=sm_90a timeout 200 python3 "$B/compile_check.py" "$W/trees/clean" "$W/trees/patched" "$R/compile" --cuobjdump "$(command -v cuobjdump)" \
  > "$R/compile.log" 2>&1; rc=$?
grep -v "FakeTensor is deprecated" "$R/compile.log" | tail -8; ts "compile rc=$rc"
ts "bench"
timeout 330 python3 "$B/bench.py" "$W/trees/clean" "$W/trees/patched" "$R" --trials "$trials" > "$R/bench.log" 2>&1; rc=$?
kill "$smi" 2>/dev/null
grep -v "FakeTensor is deprecated" "$R/bench.log" | tail -30; ts "bench rc=$rc"
python3 - "$R/times.csv" <<'PY'
import csv, statistics, sys
from collections import defaultdict
t = defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    t[(r["dest"], int(r["seqlen"]), r["causal"], r["build"])].append(float(r["kernel_ms"]))
for k in sorted({k[:3] for k in t}):
    med = {b: statistics.median(t[(*k, b)]) for b in ("plain", "off", "traced") if t[(*k, b)]}
    print(f"{k[0]:5s} s={k[1]:5d} causal={k[2]}  plain {med['plain']:.4f} ms  off {med['off'] / med['plain'] - 1:+.2%}  traced {med['traced'] / med['plain'] - 1:+.2%}")
PY
exit "$rc"
