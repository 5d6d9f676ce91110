#!/usr/bin/env bash
# Turn one device call's results (run.sh's results.tar.gz) into sample_traces/h200_fa3/: the probe dumps
# zstd-compressed, the correctness check (and the bench dumps' records check where the driver wrote it), every
# trial's kernel time and the overhead medians, and the
# docs/model.md §7 piggyback audit of the dumps (xstage-trace analyze, then xstage-trace piggyback with the host
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
[ -f "$work/res/records_bench.csv" ] && cp "$work/res/records_bench.csv" "$out/"  # drivers since the K/V steps
python3 "$(dirname "$(realpath "$0")")/../../overhead_table.py" "$out/times.csv" "$out/overhead.csv" plain traced cleared
"$cli" analyze "$2/dumps" -o "$work/run" > "$work/analyze.log"  # the dumps' folder as given (repository-relative)
"$cli" piggyback "$work/run" --calibration "$calib/calibration_host.json" --calibration "$calib/calibration_local.json" \
  -o "$out/piggyback.md" --csv "$out/piggyback.csv"
