#!/usr/bin/env bash
# One GPU call: FA3 correctness check, then interleaved trials (plain / traced / cleared) and one
# probe dump per case. Run from a folder holding fa3_driver (build.sh) and this script:
#   OUT=... bash run.sh [TRIALS]   results: $OUT/results.tar.gz (res/: check.csv, records.csv, times.csv, *.xsp, device.txt,
#   logs) and $OUT/summary.txt
# Cases: 16 heads and 16 K tokens per launch (2048 Q tiles: 15.5 per CTA on 132 SMs) at sequence
# lengths 1 K, 2 K, 4 K, 8 K and 16 K, non-causal and causal, O in HBM (local) and in host-mapped memory (host).
set -uo pipefail
trials=${1:-100}
W=$(mktemp -d); R=$W/res; mkdir -p "$R"
trap 'tar -czf "$OUT/results.tar.gz" -C "$W" res' EXIT
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
{ nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  nvidia-smi | head -4 | tail -2; uname -r; date -u +%FT%TZ; } > "$R/device.txt" 2>&1
ts "$(head -2 "$R/device.txt" | tail -1)"
timeout 120 ./fa3_driver check "$R" 2>&1 | tee "$R/check.log"; rc=${PIPESTATUS[0]}
ts "check rc=$rc"
[ "$rc" = 0 ] || exit "$rc"
cases=""
for dest in local host; do
  for causal in 0 1; do
    for s in 1024 2048 4096 8192 16384; do cases="$cases $((16384 / s)),16,$s,$causal,$dest"; done
  done
done
timeout 400 ./fa3_driver bench "$R" "$trials" $cases 2>&1 | tee "$R/bench.log"; rc=${PIPESTATUS[0]}
ts "bench rc=$rc"
python3 - "$R/times.csv" <<'PY' | tee "$OUT/summary.txt"
import csv, statistics, sys
from collections import defaultdict
t = defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    t[(r["dest"], int(r["seqlen"]), r["causal"], r["build"])].append(float(r["kernel_ms"]))
for k in sorted({k[:3] for k in t}):
    med = {b: statistics.median(t[(*k, b)]) for b in ("plain", "traced", "cleared")}
    print(f"{k[0]:5s} s={k[1]:5d} causal={k[2]}  plain {med['plain']:.4f} ms  traced {med['traced'] / med['plain'] - 1:+.2%}  cleared {med['cleared'] / med['plain'] - 1:+.2%}")
PY
exit "$rc"
