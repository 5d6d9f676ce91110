#!/usr/bin/env bash
# Probe overhead of the reference fused kernel, interleaved: the untraced and traced builds alternate
# within each round (ROUNDS rounds, default 5) for every destination (host, local; peer where 2 GPUs
# with P2P exist), each run = every shape x schedule, 21 trials, no dumps. Writes under $OUT:
#   overhead_rounds.csv   round,build,<the program's fused_times columns>
#   overhead_summary.csv  dest,shape,schedule,untraced_ms,traced_ms,ratio_minus_1 (medians over rounds)
#   ptxas_{off,on}.txt    registers of both builds
# From the repository root: OUT=... bash instrument/examples/device_overhead.sh   (~60 s on one H200)
set -uo pipefail
OUT=${OUT:-/tmp/xstage-out}
ROUNDS=${ROUNDS:-5}
W=/tmp/xstage-ovh
rm -rf "$W" && mkdir -p "$W"/bin "$OUT"
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I instrument/include -Xptxas -v"
$NV instrument/examples/fused_moe.cu -o $W/bin/off > $OUT/ptxas_off.txt 2>&1 &
$NV -DXSTAGE_TRACE instrument/examples/fused_moe.cu -o $W/bin/on > $OUT/ptxas_on.txt 2>&1 &
wait
grep -h "Used" $OUT/ptxas_*.txt
dests="host local"
[ "$(nvidia-smi -L | wc -l)" -ge 2 ] && dests="$dests peer"
for r in $(seq 1 $ROUNDS); do
  for dest in $dests; do
    for v in off on; do  # alternate the builds: drift between runs hits both
      d=$W/r$r/$v; mkdir -p $d
      timeout 120 $W/bin/$v --dest $dest --no-dumps --out $d > $d/$dest.log 2>&1 || echo "round $r $v $dest failed rc=$?"
    done
  done
done
python3 - "$W" "$OUT" "$ROUNDS" <<'PY'
import csv, glob, os, statistics, sys
w, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for r in range(1, rounds + 1):
    for v in ("off", "on"):
        for f in sorted(glob.glob(f"{w}/r{r}/{v}/fused_times_*.csv")):
            rows += [dict(round=r, build=v, **x) for x in csv.DictReader(open(f))]
with open(f"{out}/overhead_rounds.csv", "w", newline="") as fh:
    wr = csv.DictWriter(fh, fieldnames=list(rows[0])); wr.writeheader(); wr.writerows(rows)
keys = sorted({(x["dest"], x["shape"], x["schedule"]) for x in rows})
with open(f"{out}/overhead_summary.csv", "w") as fh:
    fh.write("dest,shape,schedule,rounds,untraced_ms,traced_ms,ratio_minus_1\n")
    for k in keys:
        ratios, offs, ons = [], [], []
        for r in range(1, rounds + 1):
            t = {x["build"]: float(x["kernel_ms_median"]) for x in rows if (x["dest"], x["shape"], x["schedule"]) == k and x["round"] == r}
            if len(t) == 2:
                ratios.append(t["on"] / t["off"] - 1); offs.append(t["off"]); ons.append(t["on"])
        if ratios:
            line = f"{k[0]},{k[1]},{k[2]},{len(ratios)},{statistics.median(offs):.5f},{statistics.median(ons):.5f},{statistics.median(ratios):+.4f}"
            fh.write(line + "\n"); print(line)
PY
