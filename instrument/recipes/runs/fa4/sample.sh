#!/usr/bin/env bash
# Turn one device call's results (run.sh's results.tar.gz) into sample_traces/h200_fa4/: the per-tile rows as
# probe dumps (convert.py, zstd-compressed), the correctness check, every trial's kernel time and the overhead
# medians, the compile check, the recipe's diff, and the spec §7 piggyback audit of the dumps (xstage-trace
# analyze, then xstage-trace piggyback with the host and local calibrations).
#   usage: sample.sh RESULTS_TAR_GZ OUT_DIR [PYTHON]     (run from the repository root; PYTHON has xstage-trace)
set -euo pipefail
tarball=$(realpath "$1"); out=$(realpath -m "$2"); py=${3:-.venv/bin/python}; here=$(dirname "$(realpath "$0")")
calib=sample_traces/h200_calibration
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
mkdir -p "$out/dumps"
"$py" "$here/convert.py" "$work/res" "$work/dumps"
for f in "$work"/dumps/*.xsp; do zstd -q -19 -f "$f" -o "$out/dumps/$(basename "$f").zst"; done
cp "$work/res/check.csv" "$work/res/times.csv" "$work/res/device.txt" "$work/res/smi.csv" "$out/"
cp "$work/res/compile/compile.csv" "$out/compile.csv"
cp "$work/res/fa4.diff" "$out/recipe_fa4.diff"
"$py" - "$out/times.csv" "$out/overhead.csv" <<'PY'
import csv, statistics, sys
from collections import defaultdict
t = defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])):
    t[(r["dest"], int(r["seqlen"]), int(r["causal"]), r["batch"], r["heads"])].setdefault(r["build"], {})[int(r["trial"])] = float(r["kernel_ms"])
with open(sys.argv[2], "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["dest", "seqlen", "causal", "batch", "heads", "trials", "plain_ms", "off_ms", "traced_ms",
                "off_vs_plain", "traced_vs_plain", "traced_vs_plain_paired"])
    for k in sorted(t):
        b = t[k]
        med = {n: statistics.median(b[n].values()) for n in ("plain", "off", "traced")}
        paired = statistics.median(b["traced"][i] / b["plain"][i] - 1 for i in b["plain"] if i in b["traced"])
        w.writerow([*k, len(b["plain"]), *(f"{med[n]:.5f}" for n in ("plain", "off", "traced")),
                    f"{med['off'] / med['plain'] - 1:+.4f}", f"{med['traced'] / med['plain'] - 1:+.4f}", f"{paired:+.4f}"])
PY
xs=$(dirname "$py")/xstage-trace
"$xs" analyze "$2/dumps" -o "$work/run" > "$work/analyze.log"  # the dumps' folder as given (repository-relative)
"$xs" piggyback "$work/run" --calibration "$calib/calibration_host.json" --calibration "$calib/calibration_local.json" \
  -o "$out/piggyback.md" --csv "$out/piggyback.csv"
