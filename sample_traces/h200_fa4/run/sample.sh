#!/usr/bin/env bash
# Turn one device call's results (run.sh's results.tar.gz) into sample_traces/h200_fa4/: the per-tile rows as
# probe dumps (convert.py, zstd-compressed), the correctness check, every trial's kernel time and the overhead
# medians, the compile check, the recipe's diff, and the docs/model.md §7 piggyback audit of the dumps (xstage-trace
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
"$py" "$(dirname "$(realpath "$0")")/../../overhead_table.py" "$out/times.csv" "$out/overhead.csv" plain off traced
xs=$(dirname "$py")/xstage-trace
"$xs" analyze "$2/dumps" -o "$work/run" > "$work/analyze.log"  # the dumps' folder as given (repository-relative)
"$xs" piggyback "$work/run" --calibration "$calib/calibration_host.json" --calibration "$calib/calibration_local.json" \
  -o "$out/piggyback.md" --csv "$out/piggyback.csv"
