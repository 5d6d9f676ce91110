#!/usr/bin/env bash
# One device call for several probe forms: run.sh (check, then the 20 cases x TRIALS interleaved trials)
# for each candidate folder in turn, each holding the fa3_driver that build.sh made from that form's tree.
# Run from a folder holding run.sh and the candidate folders:
#   OUT=... bash run_forms.sh TRIALS CAND...     results: $OUT/CAND/{results.tar.gz,summary.txt}
set -u
trials=$1; shift
for c in "$@"; do
  echo "=== $c $(date -u +%H:%M:%S)"
  mkdir -p "$OUT/$c"
  (cd "$c" && OUT="$OUT/$c" bash ../run.sh "$trials") 2>&1 | tail -24
done
echo "=== done $(date -u +%H:%M:%S)"
