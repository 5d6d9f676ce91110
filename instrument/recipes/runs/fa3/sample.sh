#!/usr/bin/env bash
# Turn one device call's results (run.sh's results.tar.gz) into sample_traces/h200_fa3/: the probe dumps
# zstd-compressed, the correctness check, every trial's kernel time and the overhead medians, and the
# spec §7 piggyback audit of the dumps (xstage-trace analyze, then xstage-trace piggyback with the host
# and local calibrations).
#   usage: sample.sh RESULTS_TAR_GZ OUT_DIR [XSTAGE_TRACE_CLI]     (run from the repository root)
set -euo pipefail
tarball=$(realpath "$1"); out=$(realpath -m "$2"); cli=${3:-xstage-trace}
calib=sample_traces/h200_calibration
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
mkdir -p "$out/dumps"
for f in "$work"/res/*.xsp; do zstd -q -19 -f "$f" -o "$out/dumps/$(basename "$f").zst"; done
cp "$work/res/check.csv" "$work/res/records.csv" "$work/res/times.csv" "$work/res/device.txt" "$out/"
python3 - "$out/times.csv" "$out/overhead.csv" <<'PY'
import csv, statistics, sys
from collections import defaultdict
t = defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])):
    t[(r["dest"], int(r["seqlen"]), int(r["causal"]), r["batch"], r["heads"])].setdefault(r["build"], {})[int(r["trial"])] = float(r["kernel_ms"])
with open(sys.argv[2], "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["dest", "seqlen", "causal", "batch", "heads", "trials", "plain_ms", "traced_ms", "cleared_ms",
                "traced_vs_plain", "cleared_vs_plain", "traced_vs_plain_paired"])
    for k in sorted(t):
        b = t[k]
        med = {n: statistics.median(b[n].values()) for n in ("plain", "traced", "cleared")}
        paired = statistics.median(b["traced"][i] / b["plain"][i] - 1 for i in b["plain"] if i in b["traced"])
        w.writerow([*k, len(b["plain"]), *(f"{med[n]:.5f}" for n in ("plain", "traced", "cleared")),
                    f"{med['traced'] / med['plain'] - 1:+.4f}", f"{med['cleared'] / med['plain'] - 1:+.4f}", f"{paired:+.4f}"])
PY
"$cli" analyze "$2/dumps" -o "$work/run" > "$work/analyze.log"  # the dumps' folder as given (repository-relative)
"$cli" piggyback "$work/run" --calibration "$calib/calibration_host.json" --calibration "$calib/calibration_local.json" \
  -o "$out/piggyback.md" --csv "$out/piggyback.csv"
