#!/usr/bin/env bash
# Probe overhead of the reference fused kernel, in interleaved rounds: within each round, for every
# destination (host, local; peer where 2 GPUs with P2P exist) and epilogue (tma, stg), the untraced
# build runs twice (off, off_b: the A/A comparison that measures the noise floor) and the traced build
# once (on), in an order rotated from round to round so that no build always runs first; each run =
# every shape x schedule, 21 trials, no dumps. BASELINE=DIR adds the traced build of another source
# tree (DIR/instrument/...) as build "base", for a before/after within the same rounds.
# Writes under $OUT:
#   overhead_rounds.csv   round,build,epilogue,<the program's fused_times columns>
#   overhead_summary.csv  per dest x epilogue x shape x schedule: medians over rounds of the kernel
#                         time and of traced/untraced - 1 (on), untraced/untraced - 1 (off_b, the A/A)
#                         and base/untraced - 1, with each ratio's range over the rounds
#   ptxas_{off,on}.txt    registers of both builds
# From the repository root: OUT=... bash sample_traces/h200_fused_moe/run/device_overhead.sh   (~90 s on one H200)
set -uo pipefail
OUT=${OUT:-/tmp/xstage-out}
ROUNDS=${ROUNDS:-5}
EPILOGUES=${EPILOGUES:-"tma stg"}
BASELINE=${BASELINE:-}
W=/tmp/xstage-ovh
rm -rf "$W" && mkdir -p "$W"/bin "$OUT"
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v"
$NV -I src/xstage_trace/instrument/include src/xstage_trace/instrument/examples/fused_moe.cu -o $W/bin/off > $OUT/ptxas_off.txt 2>&1 &
$NV -I src/xstage_trace/instrument/include -DXSTAGE_TRACE src/xstage_trace/instrument/examples/fused_moe.cu -o $W/bin/on > $OUT/ptxas_on.txt 2>&1 &
builds="off on off_b"
if [ -n "$BASELINE" ]; then
  $NV -I "$BASELINE/src/xstage_trace/instrument/include" -DXSTAGE_TRACE "$BASELINE/src/xstage_trace/instrument/examples/fused_moe.cu" -o $W/bin/base > $OUT/ptxas_base.txt 2>&1 &
  builds="$builds base"
fi
wait
grep -h "Used" $OUT/ptxas_*.txt
dests="host local"
[ "$(nvidia-smi -L | wc -l)" -ge 2 ] && dests="$dests peer"
set -- $builds
nb=$#
for r in $(seq 1 $ROUNDS); do
  for dest in $dests; do
    for ep in $EPILOGUES; do
      for k in $(seq 0 $((nb - 1))); do
        idx=$(( (k + r) % nb + 1 ))
        v=${!idx}
        bin=$v; [ $v = off_b ] && bin=off
        d=$W/r$r/$v/$ep; mkdir -p $d
        timeout 120 $W/bin/$bin --dest $dest --epilogue $ep --no-dumps --out $d > $d/$dest.log 2>&1 || echo "round $r $v $dest $ep failed rc=$?"
      done
    done
  done
done
python3 - "$W" "$OUT" "$ROUNDS" "$builds" "$EPILOGUES" <<'PY'
import csv, glob, statistics, sys
w, out, rounds, builds, epilogues = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5].split()
rows = []
for r in range(1, rounds + 1):
    for v in builds:
        for ep in epilogues:
            for f in sorted(glob.glob(f"{w}/r{r}/{v}/{ep}/fused_times_*.csv")):
                rows += [dict(round=r, build=v, epilogue=ep, **x) for x in csv.DictReader(open(f))]
with open(f"{out}/overhead_rounds.csv", "w", newline="") as fh:
    wr = csv.DictWriter(fh, fieldnames=list(rows[0])); wr.writeheader(); wr.writerows(rows)
key = lambda x: (x["dest"], x["epilogue"], x["shape"], x["schedule"])
others = [b for b in builds if b != "off"]
t = {(key(x), x["round"], x["build"]): float(x["kernel_ms_median"]) for x in rows}
cols = ["dest", "epilogue", "shape", "schedule", "rounds", "untraced_ms", "traced_ms"]
for b in others:
    cols += [f"{b}_minus_1", f"{b}_min", f"{b}_max"]
with open(f"{out}/overhead_summary.csv", "w") as fh:
    fh.write(",".join(cols) + "\n"); print(",".join(cols))
    for k in sorted({key(x) for x in rows}):
        rs = [r for r in range(1, rounds + 1) if all((k, r, b) in t for b in builds)]
        if not rs:
            continue
        line = list(k) + [str(len(rs)), f"{statistics.median(t[k, r, 'off'] for r in rs):.5f}",
                          f"{statistics.median(t[k, r, 'on'] for r in rs):.5f}"]
        for b in others:
            q = [t[k, r, b] / t[k, r, "off"] - 1 for r in rs]
            line += [f"{statistics.median(q):+.4f}", f"{min(q):+.4f}", f"{max(q):+.4f}"]
        fh.write(",".join(line) + "\n"); print(",".join(line))
PY
